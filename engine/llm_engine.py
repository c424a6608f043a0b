"""`LLMEngine`: the one entry point for the GUI, the CLI, benchmarks and tests.

Per `step()`:
  data in:      requests queued by `add_request` (token ids, sampling parameters, arrival time);
  state read:   the scheduler's queues and the block manager's free list and prefix hashes;
  state written: KV cache blocks (executor), sequence progress and metrics, block tables;
  data out:     `StepResult`: one `RequestOutput` per request that got a token or ended, and
                `StepStats` for the plots;
  errors:       `EngineError` for bad requests (raised by `add_request`, never mid-step);
                requests that can never run come back finished with reason "rejected".
"""

from __future__ import annotations

import itertools
import numbers
import time
from collections.abc import Callable
from collections.abc import Sequence as SequenceOf

from engine.configuration.config import EngineConfig
from engine.configuration.speculation_methods import speculation_method
from engine.errors import ConfigError, EngineError
from engine.execution.executor import ModelExecutor
from engine.execution.kv_sizing import check_the_longest_request_fits, kv_blocks
from engine.execution.torch_model import prepare_torch_model
from engine.loading.model_file import ModelSource, ProgressCallback, no_progress
from engine.model_spec.kv_layout import KvLayout
from engine.quantization import describe_quantization
from engine.requests.detokenizer import IncrementalDetokenizer
from engine.requests.metrics import StepStats
from engine.requests.outputs import RequestOutput, StepResult
from engine.requests.request_checks import check_request, prompt_token_ids
from engine.requests.sampling_params import SamplingParams
from engine.requests.sequence import FinishReason, Sequence
from engine.requests.step_trace import BlockChange, Emitted, KvState, StepTrace
from engine.scheduling.batch import ScheduledBatch
from engine.scheduling.block_manager import BlockManager
from engine.scheduling.scheduler import Scheduler
from engine.simulation import is_simulated, prepare_simulated_model
from engine.simulation.serving_stacks import AUTO as AUTO_STACK
from kernels import cpu_operators

_SEED_MASK = 0x7FFF_FFFF_FFFF_FFFF


class LLMEngine:
    def __init__(
        self,
        config: EngineConfig | None = None,
        progress: ProgressCallback = no_progress,
        clock: Callable[[], float] = time.perf_counter,
        source: ModelSource | None = None,
    ):
        """A real engine for a model file, or a simulated one for "simulated:MODEL@HARDWARE" (its
        own simulated clock; `clock` and `source` apply to real models). `source`: an already read
        model file, reused instead of reading `config.model` again (a reconfiguration that keeps
        the model, or tests that build many engines)."""
        config = config or EngineConfig()
        speculation = speculation_method(config.speculative_method)
        if is_simulated(config.model):
            if not speculation.on_simulated_gpus:
                raise ConfigError(
                    f"speculative_method = {speculation.name!r}: {speculation.not_on_simulated_gpus} for {config.model}"
                )
            prepared = prepare_simulated_model(config)
        else:
            if not speculation.on_real_models:
                raise ConfigError(
                    f"speculative_method = {speculation.name!r}: {config.model} runs for real and "
                    f"{speculation.not_on_real_models}"
                )
            if config.serving_stack != AUTO_STACK:
                raise ConfigError(
                    f"serving_stack = {config.serving_stack!r}: a serving stack's costs are for simulated GPUs "
                    f"(simulated:MODEL@GPU); {config.model} runs for real, expected 'auto'"
                )
            prepared = prepare_torch_model(config, progress, clock, source)
        config = prepared.config  # "auto" settings resolved
        self.config, self.model_config, self.tokenizer = config, prepared.model_config, prepared.tokenizer
        self.quantization_choice = prepared.quantization_choice
        self.clock, self.sleep = prepared.clock, prepared.sleep
        self.idle_wait_is_free = prepared.idle_wait_is_free
        self.model_path, self.stored_tensor_types = prepared.model_path, prepared.stored_tensor_types
        self.device, self.dtype, self.kv_dtype = prepared.device, prepared.dtype, prepared.kv_dtype
        self.weight_bytes, self.unquantized_weight_bytes = prepared.weight_bytes, prepared.unquantized_weight_bytes
        self.weight_parts = prepared.weight_parts
        self.activation_smoothing = prepared.activation_smoothing
        self.max_model_len = min(
            config.max_model_len or self.model_config.max_position_embeddings, self.model_config.max_position_embeddings
        )
        self.eos_token_ids = set(self.model_config.eos_token_ids) | set(
            self.tokenizer.eos_token_ids if self.tokenizer else ()
        )
        self._sequences: dict[str, Sequence] = {}  # every unfinished request
        self._undelivered: list[RequestOutput] = []  # rejections and aborts, reported by the next step
        self._arrivals = itertools.count()
        self._automatic_ids = itertools.count()
        self.num_rejections = 0
        self.num_steps = 0  # steps taken; each StepTrace carries its number

        progress("allocate KV cache", 0.0)
        self.kv_layout = KvLayout.of(self.model_config)
        num_blocks = kv_blocks(config, prepared.kv_limits, self.kv_block_bytes, self.kv_layout.tensors_per_block)
        self.executor: ModelExecutor = prepared.create_executor(num_blocks)
        self.block_manager = BlockManager(
            num_blocks, config.block_size, config.enable_prefix_caching, self.kv_layout.windows
        )
        self.scheduler = Scheduler(config, self.block_manager, self.max_model_len, frozenset(self.eos_token_ids))
        if prepared.kv_limits.must_hold_longest_request:
            check_the_longest_request_fits(
                self.max_model_len,
                self.scheduler.blocks_held(self.max_model_len),
                self.num_kv_blocks,
                self.kv_block_bytes,
                self.kv_cache_bytes,
                prepared.kv_limits,
            )
        progress("allocate KV cache", 1.0)
        progress("warm up", 0.0)
        if self.device.type == "cpu" and not is_simulated(config.model):
            # Its first build can wait for another process's (a shared build cache): say for what,
            # and let a cancelled load end the wait (the progress callback raises).
            cpu_operators.available(
                lambda lock, waited: progress(
                    f"warm up: waiting {waited:.0f} s for {lock}, held by another process building the "
                    f"attention operator (at most {cpu_operators.LOCK_TIMEOUT_S:.0f} s)",
                    0.0,
                )
            )
        self.executor.warm_up()
        progress("warm up", 1.0)

    @property
    def quantization(self) -> str:
        """What runs, e.g. "int4 g32 + int8 head"."""
        config = self.config
        return describe_quantization(
            config.quantization, config.group_size, config.quantize_lm_head, config.batched_bf16_copy
        )

    # ----- capacity ------------------------------------------------------------------------------

    @property
    def kv_bytes_per_token(self) -> int:
        return self.model_config.kv_bytes_per_token(self.kv_dtype.itemsize)

    @property
    def num_kv_blocks(self) -> int:
        return self.block_manager.num_blocks

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the cache holds when every layer keeps every token (requests shorter than any
        sliding window); a long request on a model with sliding-window layers holds more."""
        return self.block_manager.num_blocks * self.config.block_size // len(self.kv_layout.groups)

    @property
    def kv_block_bytes(self) -> int:
        """One KV block: `block_size` tokens of K and V in each of the layers that share it."""
        layer_token_bytes = self.kv_bytes_per_token // self.model_config.num_layers
        return self.kv_layout.block_bytes(self.config.block_size, layer_token_bytes)

    @property
    def kv_cache_bytes(self) -> int:
        return self.executor.kv_cache_bytes

    # ----- requests ------------------------------------------------------------------------------

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
        request_id: str | None = None,
    ) -> str:
        params = params or SamplingParams()
        now = self.clock()
        check_request(params, priority, arrival_time, request_id, now, self.model_config.vocab_size)
        if speculation_method(self.config.speculative_method).greedy_only and not params.greedy:
            raise EngineError(
                f"temperature = {params.temperature:g}: {self.config.speculative_method} speculative decoding keeps a "
                "request's tokens exactly those of plain decoding for greedy sampling only; expected temperature 0, "
                "or speculative_method = 'off'"
            )
        token_ids = prompt_token_ids(prompt, self.tokenizer, self.model_config.vocab_size, self.model_path)
        if request_id is not None and self._id_in_use(request_id):
            raise EngineError(
                f"request_id {request_id!r} is already in use by a request whose end has not been "
                "delivered (an abort or rejection is delivered by the next step)"
            )
        arrival_index = next(self._arrivals)
        request_id = self._new_request_id() if request_id is None else request_id
        seed = params.seed if params.seed is not None else hash((self.config.seed, arrival_index)) & _SEED_MASK
        seq = Sequence(
            request_id,
            token_ids,
            params,
            now if arrival_time is None else arrival_time,
            arrival_index=arrival_index,
            seed=seed,
            priority=priority,
        )
        if self.tokenizer is not None:
            seq.detokenizer = IncrementalDetokenizer(self.tokenizer, params.stop)
        reason = self.scheduler.rejection_reason(seq)
        if reason is not None:
            seq.mark_finished(FinishReason.REJECTED, now, reason)
            self.num_rejections += 1
            self._undelivered.append(self._output(seq, []))
        else:
            self.scheduler.add(seq)
            self._sequences[request_id] = seq
        return request_id

    def receive_kv(self, token_ids: list[int]) -> int:
        """K/V for `token_ids` computed by another instance arrives (prefill/decode disaggregation,
        engine/deployment.py): a request whose prompt starts with them is admitted with
        their full blocks computed (BlockManager.receive_prefix). Needs prefix caching, and no step
        traces: a trace records what steps do, and this happens between them. Returns the blocks
        written."""
        if not self.config.enable_prefix_caching or self.config.step_trace:
            raise EngineError(
                "receive_kv: expected enable_prefix_caching = true and step_trace = false (received K/V enters "
                f"through the prefix cache, between steps); got {self.config.enable_prefix_caching} and "
                f"{self.config.step_trace}"
            )
        return self.block_manager.receive_prefix(token_ids)

    def _new_request_id(self) -> str:
        """The next number not already taken by a caller's own id."""
        while self._id_in_use(request_id := str(next(self._automatic_ids))):
            pass
        return request_id

    def _id_in_use(self, request_id: str) -> bool:
        return request_id in self._sequences or self.ended_unreported(request_id) is not None

    def abort(self, request_id: str) -> bool:
        """Stop a request and free everything it holds; False if it is unknown or already done."""
        seq = self._sequences.pop(request_id, None)
        if seq is None:
            return False
        self.scheduler.finish(seq, FinishReason.ABORT, "", self.clock())
        self._undelivered.append(self._output(seq, []))
        return True

    def fail_unfinished(self, detail: str) -> list[str]:
        """End every unfinished request with finish reason "error" and `detail` (what failed),
        freeing what it holds; their ends come with the next step. The ids ended."""
        failed, now = list(self._sequences), self.clock()
        for request_id in failed:
            seq = self._sequences.pop(request_id)
            self.scheduler.finish(seq, FinishReason.ERROR, detail, now)
            self._undelivered.append(self._output(seq, []))
        return failed

    def has_unfinished(self) -> bool:
        return bool(self._sequences or self._undelivered)

    def unfinished_ids(self) -> list[str]:
        """The requests added and not ended, in the order they were added."""
        return list(self._sequences)

    def close(self) -> None:
        """Stop what runs for this engine in the background (the decode graph's compile) and wait
        for it; the engine still serves, eagerly. Call it before building the next engine; at
        interpreter exit it is done for every engine (engine/execution/background_compile.py)."""
        self.executor.close()

    def __enter__(self) -> LLMEngine:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def sequence(self, request_id: str) -> Sequence | None:
        """The live state of an unfinished request (for views that show queues and block tables)."""
        return self._sequences.get(request_id)

    def ended_unreported(self, request_id: str) -> RequestOutput | None:
        """A request that ended outside a step (aborted, rejected) and whose end the next step
        reports; None otherwise."""
        return next((output for output in self._undelivered if output.request_id == request_id), None)

    # ----- the loop ------------------------------------------------------------------------------

    def step(self) -> StepResult:
        start = self.clock()
        outputs, self._undelivered = self._undelivered, []
        try:
            return self._step(start, outputs)
        except BaseException:
            # The ends of requests aborted or rejected since the last step are delivered by the next.
            self._undelivered = [output for output in outputs if output.finished] + self._undelivered
            raise

    def _step(self, start: float, outputs: list[RequestOutput]) -> StepResult:
        trace = self.scheduler.trace
        before = self._trace_before(trace.begin_step()) if trace.enabled else None
        batch = self.scheduler.schedule(start)
        beside_compile = self.executor.compile_progress is not None
        execute_s = 0.0
        accepted_before = self.scheduler.num_accepted_tokens
        if not batch.is_empty:
            executing = self.clock()
            sampled = self.executor.execute(batch)
            now = self.clock()
            execute_s = now - executing
            for seq, new_tokens in self.scheduler.update(batch, sampled, now):  # given tokens; some stopped
                if seq.is_finished:
                    del self._sequences[seq.request_id]
                outputs.append(self._output(seq, new_tokens))
        end = self.clock()
        scheduled = {entry.request_id: len(entry.token_ids) for entry in batch.sequences}
        accepted = self.scheduler.num_accepted_tokens - accepted_before
        stats = self._stats(batch, start, end, beside_compile, accepted)
        step_trace = self._step_trace(before, outputs, execute_s, end - start, end) if trace.enabled else None
        self.num_steps += 1
        return StepResult(outputs, stats, scheduled, step_trace)

    def generate(
        self, prompts: SequenceOf[str | list[int]], params: SamplingParams | SequenceOf[SamplingParams] | None = None
    ) -> list[RequestOutput]:
        """Run the prompts to completion (alongside anything already queued); outputs in prompt order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], numbers.Integral)):
            raise EngineError("generate: expected a list of prompts (texts or token-id lists)")
        if isinstance(params, SequenceOf):
            if len(params) != len(prompts):
                raise EngineError(
                    f"generate: {len(prompts)} prompts but {len(params)} SamplingParams; give one, or one per prompt"
                )
            per_prompt = list(params)
        else:
            per_prompt = [params] * len(prompts)
        ids = [self.add_request(prompt, prompt_params) for prompt, prompt_params in zip(prompts, per_prompt)]
        done: dict[str, RequestOutput] = {}
        waiting_for = set(ids)
        while waiting_for:
            for output in self.step().outputs:
                if output.finished and output.request_id in waiting_for:
                    waiting_for.discard(output.request_id)
                    done[output.request_id] = output
        return [done[request_id] for request_id in ids]

    def _output(self, seq: Sequence, new_token_ids: list[int]) -> RequestOutput:
        detokenizer = seq.detokenizer
        # The new text first: once finished, it takes in the bytes of a character left unfinished.
        new_text = detokenizer.take_new_text(seq.is_finished) if detokenizer is not None else ""
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=new_token_ids,
            token_ids=seq.output_token_ids,
            finished=seq.is_finished,
            finish_reason=seq.finish_reason.value if seq.finish_reason else None,
            text=detokenizer.text if seq.is_finished and detokenizer is not None else None,
            new_text=new_text,
            metrics=seq.metrics,
        )

    def _kv_state(self) -> KvState:
        manager = self.block_manager
        return KvState(manager.num_free_blocks, manager.num_cached_free_blocks, manager.num_used_blocks)

    def _trace_before(self, released: list[BlockChange]) -> dict:
        """The "before" part of this step's trace: what the scheduler is about to see."""
        scheduler = self.scheduler
        return dict(
            waiting=len(scheduler.waiting),
            waiting_long=len(scheduler.waiting_long),
            running=len(scheduler.running),
            token_budget=self.config.max_num_batched_tokens,
            kv_before=self._kv_state(),
            released_before=released,
        )

    def _step_trace(
        self, before: dict, outputs: list[RequestOutput], execute_s: float, duration_s: float, end: float
    ) -> StepTrace:
        rows, held, block_changes, registered, preemptions, speculation = self.scheduler.trace.end_step()
        emitted = [
            Emitted(
                output.request_id,
                output.new_token_ids,
                output.finish_reason,
                output.metrics.finish_detail if output.finished else "",
            )
            for output in outputs
        ]
        return StepTrace(
            step=self.num_steps,
            time_s=end,
            **before,
            rows=rows,
            held=held,
            execute_s=execute_s,
            other_s=duration_s - execute_s,
            block_changes=block_changes,
            registered=registered,
            preemptions=preemptions,
            kv_after=self._kv_state(),
            emitted=emitted,
            speculation=speculation,
        )

    def _stats(
        self, batch: ScheduledBatch, start: float, end: float, beside_compile: bool, accepted_tokens: int
    ) -> StepStats:
        manager, scheduler = self.block_manager, self.scheduler
        return StepStats(
            time_s=end,
            step_duration_s=end - start,
            prefill_tokens=batch.num_prefill_tokens,
            decode_tokens=len(batch.decodes),  # each decode row's own token; its proposals are counted apart
            speculating_rows=sum(1 for entry in batch.decodes if entry.num_proposed),
            proposed_tokens=batch.num_proposed_tokens,
            accepted_tokens=accepted_tokens,
            num_seqs=len(batch.decodes) + len(batch.prefills),
            kv_blocks_used=manager.num_used_blocks,
            kv_blocks_total=manager.num_blocks,
            kv_blocks_cached_free=manager.num_cached_free_blocks,
            num_waiting=len(scheduler.waiting),
            num_waiting_long=len(scheduler.waiting_long),
            num_running=len(scheduler.running),
            preemptions_total=scheduler.num_preemptions,
            rejections_total=self.num_rejections,
            prefix_cache_hit_tokens_total=manager.prefix_hit_tokens,
            prefix_cache_query_tokens_total=manager.prefix_query_tokens,
            decode_compiled=self.executor.last_step_compiled,
            beside_compile=beside_compile,
        )
