"""`StepTrace`: the causal record of one engine step, in four parts.

- before: what the scheduler saw (queue lengths, KV blocks free / cached-free / used, the token
  budget), and the blocks that requests aborted since the last step gave back;
- computation: the scheduled rows (prefill chunk start..end of the prompt, or a decode), which
  queue each admitted request came from, why each queue's head was not admitted (if it was not),
  and where the step's time went;
- persisted: KV blocks each request took fresh, reused from the prefix cache, or gave back (and
  which of those went back on the free list), blocks that became findable by prefix, and each
  preemption with its victim and reason;
- to the caller: tokens emitted per request, finished requests with their reason, rejections.

The scheduler and block manager build it from what they already do (`TraceBuilder`): no pass over
tensors. The block counts balance: before.used + taken from the free list - returned to it =
after.used, so a replay of allocations and releases rebuilds the block map at any step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# Where an admitted request waited (the scheduler's two queues).
WAITING, WAITING_LONG = "waiting", "waiting_long"


@dataclass
class KvState:
    free_blocks: int  # on the free list, cached prefixes included
    cached_free_blocks: int  # free, but still holding a prefix a new prompt can reuse
    used_blocks: int  # held by at least one request


@dataclass
class ScheduledRow:
    request_id: str
    kind: str  # "prefill" or "decode"
    start: int  # the first position computed this step (tokens already cached)
    end: int  # one past the last: the context length after the step
    num_prompt_tokens: int  # n in "prefill start..end of n"
    admitted_from: str | None  # WAITING or WAITING_LONG when admitted this step, else None (was running)
    recompute: bool  # prefilling again after a preemption


# What a BlockChange did.
ALLOCATE = "allocate"  # fresh blocks off the free list (a prefix they held is overwritten)
REUSE = "reuse"  # prefix-cache hits given to a request at admission
RELEASE = "release"  # a request gave its blocks back (finished, aborted or preempted)


@dataclass
class BlockChange:
    request_id: str
    action: str  # ALLOCATE, REUSE or RELEASE
    block_ids: list[int]
    # The ids that left the free list (ALLOCATE: all; REUSE: the cached-free ones) or joined it
    # (RELEASE: the ones nobody else held).
    free_list: list[int]
    cause: str = ""  # why a RELEASE happened: "preempted", "finished (length)", "aborted", "left the sliding window"
    # Of an ALLOCATE's or REUSE's blocks, those a sliding-window group of layers takes
    # (engine/model_spec/kv_layout.py); the rest serve full-attention layers.
    window_blocks: list[int] = field(default_factory=list)


@dataclass
class Held:
    """The head of a queue that was not admitted in a step, and why (everyone behind it waits too)."""

    request_id: str
    queue: str  # WAITING or WAITING_LONG
    reason: str  # e.g. "max_num_seqs (64) reached", "the step's token budget (1024 tokens) is used"


@dataclass
class Preemption:
    victim: str
    reason: str  # e.g. "no free KV block for request 7 (needs 1, 0 free); victim 12: the latest arrival"


@dataclass
class Emitted:
    request_id: str
    token_ids: list[int]  # new this step
    finish_reason: str | None  # stop, length, abort, rejected; None while it runs
    finish_detail: str = ""


@dataclass
class Speculation:
    """A decode row's speculative proposals and how many of them, in order, the model agreed with."""

    request_id: str
    proposed: list[int]
    accepted: int

    @property
    def rejected(self) -> int:
        return len(self.proposed) - self.accepted


@dataclass
class StepTrace:
    step: int  # the engine's step counter, from 0
    time_s: float  # engine clock at the end of the step (as StepStats.time_s)
    # before
    waiting: int
    waiting_long: int
    running: int
    token_budget: int
    kv_before: KvState
    released_before: list[BlockChange]  # by requests aborted between steps; kv_before already counts them
    # computation
    rows: list[ScheduledRow]
    held: list[Held]  # each waiting queue's head that was not admitted, and why
    execute_s: float  # the executor: model forward and sampling
    other_s: float  # the rest of the step: scheduling, block bookkeeping, stop checks
    # persisted
    block_changes: list[BlockChange]  # in the order they happened
    registered: list[int]  # blocks whose content became findable by prefix
    preemptions: list[Preemption]
    kv_after: KvState
    # to the caller
    emitted: list[Emitted]
    # Read back from a run log's summary line (workbench/step_traces/log.py): decode rows, and tokens
    # emitted by them, that it counted instead of listing. Always 0 on a live trace.
    decode_rows_omitted: int = 0
    tokens_omitted: int = 0
    speculation: list[Speculation] = field(default_factory=list)  # per speculating decode row

    def blocks_taken(self) -> int:
        """Blocks that left the free list in this step."""
        return sum(len(change.free_list) for change in self.block_changes if change.action != RELEASE)

    def blocks_returned(self) -> int:
        """Blocks that went back on the free list in this step."""
        return sum(len(change.free_list) for change in self.block_changes if change.action == RELEASE)


class TraceBuilder:
    """Collects one step's rows, block changes, registrations and preemptions as the scheduler and
    block manager make them. Releases outside a step (aborts) are kept for the next step's "before".
    What costs something to describe (a preemption's reason, the held queues, the rows) is passed
    as a function, called only here: `NoTrace` takes the same calls and does nothing."""

    enabled = True

    def __init__(self, is_windowed: Callable[[int], bool]):
        self._is_windowed = is_windowed  # whether a block serves a sliding-window group
        self.in_step = False
        self.rows: list[ScheduledRow] = []
        self.admitted_from: dict[str, str] = {}
        self.block_changes: list[BlockChange] = []
        self.registered: list[int] = []
        self.preemptions: list[Preemption] = []
        self.held: list[Held] = []
        self.speculation: list[Speculation] = []
        self.between_steps: list[BlockChange] = []

    def begin_step(self) -> list[BlockChange]:
        """Start a step; returns what was released since the last one."""
        released, self.between_steps = self.between_steps, []
        self.in_step = True
        return released

    def _changed(self, change: BlockChange) -> None:
        if change.block_ids:
            (self.block_changes if self.in_step else self.between_steps).append(change)

    def _windowed(self, block_ids: list[int]) -> list[int]:
        return [block_id for block_id in block_ids if self._is_windowed(block_id)]

    def released(self, request_id: str, block_ids: list[int], freed: list[int], cause: str) -> None:
        self._changed(BlockChange(request_id, RELEASE, block_ids, freed, cause))

    def allocated(self, request_id: str, block_ids: list[int]) -> None:
        self._changed(BlockChange(request_id, ALLOCATE, block_ids, block_ids, "", self._windowed(block_ids)))

    def admitted(self, request_id: str, queue: str, reused: list[int], from_free: list[int]) -> None:
        self.admitted_from[request_id] = queue
        self._changed(BlockChange(request_id, REUSE, reused, from_free, "", self._windowed(reused)))

    def describe(self, text: Callable[[], str]) -> str:
        """A record's text, built only where it is kept."""
        return text()

    def preempted(self, request_id: str, block_ids: list[int], freed: list[int], reason: str) -> None:
        self._changed(BlockChange(request_id, RELEASE, block_ids, freed, "preempted"))
        self.preemptions.append(Preemption(request_id, reason))

    def held_back(self, held: Callable[[], list[Held]]) -> None:
        self.held.extend(held())

    def scheduled(self, rows: Callable[[dict[str, str]], list[ScheduledRow]]) -> None:
        """The step's rows, from which queue each admitted request came."""
        self.rows = rows(self.admitted_from)

    def registered_blocks(self, block_ids: list[int]) -> None:
        self.registered.extend(block_ids)

    def speculated(self, request_id: str, proposed: list[int], accepted: int) -> None:
        self.speculation.append(Speculation(request_id, proposed, accepted))

    def end_step(
        self,
    ) -> tuple[list[ScheduledRow], list[Held], list[BlockChange], list[int], list[Preemption], list[Speculation]]:
        """This step's records, and a clean slate for the next one."""
        taken = (self.rows, self.held, self.block_changes, self.registered, self.preemptions, self.speculation)
        self.rows, self.held, self.block_changes, self.registered, self.preemptions, self.speculation = (
            [],
            [],
            [],
            [],
            [],
            [],
        )
        self.admitted_from = {}
        self.in_step = False
        return taken


class NoTrace(TraceBuilder):
    """A configuration without step traces: every record is dropped, and nothing costly is built."""

    enabled = False

    def __init__(self):
        super().__init__(lambda block_id: False)

    def released(self, request_id: str, block_ids: list[int], freed: list[int], cause: str) -> None:
        pass

    def allocated(self, request_id: str, block_ids: list[int]) -> None:
        pass

    def admitted(self, request_id: str, queue: str, reused: list[int], from_free: list[int]) -> None:
        pass

    def describe(self, text: Callable[[], str]) -> str:
        return ""

    def preempted(self, request_id: str, block_ids: list[int], freed: list[int], reason: str) -> None:
        pass

    def held_back(self, held: Callable[[], list[Held]]) -> None:
        pass

    def scheduled(self, rows: Callable[[dict[str, str]], list[ScheduledRow]]) -> None:
        pass

    def registered_blocks(self, block_ids: list[int]) -> None:
        pass

    def speculated(self, request_id: str, proposed: list[int], accepted: int) -> None:
        pass
