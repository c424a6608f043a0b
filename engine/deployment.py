"""A deployment of several simulated instances on one time axis: data parallelism, and
prefill/decode disaggregation as a what-if.

`data_parallel_size` instances of the model, each an engine on its own tensor_parallel_size x
pipeline_parallel_size GPUs ("simulated:llama-3-8b@4xh100-80gb" with 4 instances of one GPU).

- Colocated (prefill_instances = 0): each request goes to the instance with the fewest
  unfinished requests (ties: the lowest index) and runs there, prefill and decode.
- Disaggregated (prefill_instances = P): a request is prefilled on one of the P prefill instances
  (its first token comes from there, as in DistServe and Splitwise), then its prompt's K/V goes
  over the link to one of the D = data_parallel_size - P decode instances, which makes the rest
  of its tokens. The transfer takes Parallelism.kv_transfer_s; each instance's link carries one
  transfer at a time (one starts when both ends' links are free). The decode instance takes the
  K/V into its prefix cache (LLMEngine.receive_kv), so it computes only the prompt's last partial
  block and the first token before its next one: as vLLM's KV connectors count external tokens.

Each instance keeps its own simulated clock. `step()` runs the earliest event (an instance's step
or a K/V arrival) and none at or after `until`, the next planned arrival, so a request that arrives
while its instance is mid-step joins that instance's next step, not a later one (a conservative
discrete-event simulation: an event only ever causes later ones).

Assumptions, not measurements: the instances share one node's link (the catalogue's, per GPU);
transfers do not slow the steps running beside them; K/V at 16 bits.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections import Counter
from dataclasses import dataclass

from engine.configuration.config import EngineConfig
from engine.core import EngineCore
from engine.errors import ConfigError, EngineError
from engine.llm_engine import LLMEngine
from engine.requests.metrics import RequestMetrics, StepStats
from engine.requests.outputs import RequestOutput
from engine.requests.sampling_params import SamplingParams
from engine.simulation import SimulatedTarget, is_simulated, target_name
from engine.simulation.catalogue import hardware_profile, model_shape
from engine.simulation.parallel import Parallelism

PREFILL, DECODE, BOTH = "prefill", "decode", "prefill and decode"


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams  # as asked
    priority: int
    instance: int  # the instance that holds it (while its K/V is sent: the one it goes to)
    # Disaggregated, once its first token is out: what its prefill instance measured, with where
    # and when its K/V went; its first token; whether the K/V has arrived.
    prefill: RequestMetrics | None = None
    first_token: int = 0
    arrived: bool = False


@dataclass
class DeploymentStep:
    outputs: list[RequestOutput]
    stats: StepStats | None  # the whole deployment after the instance's step; None when none stepped
    scheduled: dict[str, int]
    instance: int | None  # the instance that stepped
    # That instance's step error, when it raised: its requests ended with it (engine/core.py).
    failure: str | None = None


class Deployment:
    def __init__(self, config: EngineConfig):
        if not is_simulated(config.model):
            raise ConfigError(
                f"data_parallel_size = {config.data_parallel_size}, prefill_instances = {config.prefill_instances}: "
                "several instances (and prefill/decode disaggregation) need a simulated model "
                f"(simulated:MODEL@4xGPU); {config.model} runs as one engine, expected the defaults"
            )
        if config.simulation_speed:
            raise ConfigError(
                "simulation_speed: a deployment of several instances runs as fast as the host allows; expected 0, "
                f"got {config.simulation_speed}"
            )
        target = SimulatedTarget.parse(config.model)
        name, hardware, count, single = target.model, target.hardware, target.gpu_count, target.gpu
        split = Parallelism(config.tensor_parallel_size, config.pipeline_parallel_size)
        instances = config.data_parallel_size
        if instances * split.gpus != count:
            raise ConfigError(  # the reason first: a status line cut at 800 px still says it
                f"{hardware} has {count} GPUs, not the {instances * split.gpus} these settings need "
                f"(data_parallel_size x tensor_parallel_size x pipeline_parallel_size = {instances} x "
                f"{split.tensor} x {split.pipeline}); expected {count}"
            )
        link = hardware_profile(single)
        if config.prefill_instances and not link.link_bytes_s:
            raise ConfigError(
                f"{hardware}: {single} has no link catalogued (link_bytes_s) to send K/V between instances"
            )
        self.config = config
        self.num_prefill = config.prefill_instances
        decode_role = DECODE if self.num_prefill else BOTH
        self.roles = [PREFILL] * self.num_prefill + [decode_role] * (instances - self.num_prefill)
        one_instance = f"{split.gpus}x{single}" if split.gpus > 1 else single
        instance_config = dataclasses.replace(
            config,
            model=target_name(name, one_instance),
            data_parallel_size=1,
            prefill_instances=0,
            step_trace=False,
        )
        # A decode instance takes K/V in through its prefix cache (LLMEngine.receive_kv), and has
        # no long-prompt queue: it computes at most a block of each prompt, the rest was sent.
        decode_config = dataclasses.replace(instance_config, enable_prefix_caching=True, long_prompt_threshold=0)
        self.instances = [LLMEngine(decode_config if role == DECODE else instance_config) for role in self.roles]
        # Each instance is stepped through its core: a failed step ends that instance's requests
        # (routed as the deployment's, finish reason "error") and the deployment serves on.
        self.cores = [EngineCore(engine) for engine in self.instances]
        self.model_config, self.max_model_len = self.instances[0].model_config, self.instances[0].max_model_len
        shape, _ = model_shape(name)
        kv_bytes = self.instances[0].kv_dtype.itemsize
        self.kv_transfer_s = lambda tokens: split.kv_transfer_s(
            tokens, shape, kv_bytes, link.link_bytes_s, link.link_latency_s
        )
        self.now = 0.0
        self._load: Counter[int] = Counter()  # instance -> its unfinished requests
        self._link_free = [0.0] * instances  # when each instance's link is free for the next transfer
        self._transfers: list[tuple[float, int, str]] = []  # (K/V arrival time, order, request id): a heap
        self._transfer_order = itertools.count()
        self._requests: dict[str, _Request] = {}  # every unfinished request
        self._undelivered: list[RequestOutput] = []  # aborted while its K/V was sent: the next step reports it
        self._automatic_ids = itertools.count()

    # ----- time ------------------------------------------------------------------------------------

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        """An idle wait: the next arrival finds each idle instance at its own clock."""
        self.now += max(seconds, 0.0)

    def _bring_forward(self, index: int, time: float) -> None:
        """An instance with nothing to do waits until `time`; one still in its last step ends it first."""
        clock = self.instances[index].clock
        clock.advance(time - clock.now)

    def _least_loaded(self, role: str, time: float) -> int:
        """Of the instances in this role: the fewest unfinished requests, then the first free, then the first."""
        return min(
            (index for index, each in enumerate(self.roles) if each == role),
            key=lambda index: (self._load[index], max(self.instances[index].clock(), time), index),
        )

    # ----- requests --------------------------------------------------------------------------------

    def add_request(
        self,
        prompt: list[int],
        params: SamplingParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
        request_id: str | None = None,
    ) -> str:
        """As LLMEngine.add_request; `arrival_time` no later than the deployment's clock."""
        params = params or SamplingParams()
        arrival = self.now if arrival_time is None else arrival_time
        request_id = f"d{next(self._automatic_ids)}" if request_id is None else request_id
        if request_id in self._requests:
            raise EngineError(f"request_id {request_id!r} is already in use by an unfinished request")
        index = self._least_loaded(PREFILL if self.num_prefill else BOTH, arrival)
        self._bring_forward(index, arrival)
        asked = dataclasses.replace(params, max_tokens=1) if self.num_prefill else params
        self.instances[index].add_request(prompt, asked, arrival_time=arrival, priority=priority, request_id=request_id)
        self._requests[request_id] = _Request(list(prompt), params, priority, index)
        self._load[index] += 1
        return request_id

    def abort(self, request_id: str) -> bool:
        request = self._requests.get(request_id)
        if request is None:
            return False
        if request.prefill is not None and not request.arrived:  # its K/V is on the way: it never lands
            self._end(request_id)
            self._transfers = [transfer for transfer in self._transfers if transfer[2] != request_id]
            heapq.heapify(self._transfers)
            metrics = dataclasses.replace(request.prefill, token_times=list(request.prefill.token_times))
            metrics.finish_reason, metrics.finish_time = "abort", self.now
            self._undelivered.append(RequestOutput(request_id, [], [request.first_token], True, "abort", None, metrics))
            return True
        return self.instances[request.instance].abort(request_id)

    def has_unfinished(self) -> bool:
        return bool(self._requests or self._undelivered)

    def progress(self, request_id: str) -> tuple[str, RequestMetrics, int, int] | None:
        """(state, metrics so far, prompt tokens, prompt and output tokens so far) of a request not
        yet reported ended; None otherwise."""
        request = self._requests.get(request_id)
        if request is None:
            ended = next((output for output in self._undelivered if output.request_id == request_id), None)
            if ended is None:
                return None
            prompt_tokens = ended.metrics.num_prompt_tokens
            return "aborted", ended.metrics, prompt_tokens, prompt_tokens + len(ended.token_ids)
        if request.prefill is not None and not request.arrived:
            return "sending K/V", request.prefill, len(request.prompt), len(request.prompt) + 1
        engine = self.instances[request.instance]
        seq = engine.sequence(request_id)
        if seq is not None:
            metrics, state = seq.metrics, seq.state
        else:
            ended = engine.ended_unreported(request_id)
            if ended is None:
                return None
            metrics, state = ended.metrics, ended.finish_reason
        if request.prefill is not None:
            metrics = _joined(request.prefill, metrics)
        return state, metrics, len(request.prompt), len(request.prompt) + len(metrics.token_times)

    # ----- the loop --------------------------------------------------------------------------------

    def _next_event(self) -> tuple[float, int, int] | None:
        """(time, 0 for a K/V arrival or 1 for a step, the instance that steps) of the earliest
        event. At the same time a K/V arrival goes first, so that the step after it can admit it."""
        events = [(engine.clock(), 1, index) for index, engine in enumerate(self.instances) if engine.has_unfinished()]
        if self._transfers:
            events.append((self._transfers[0][0], 0, -1))
        return min(events, default=None)

    def step(self, until: float | None = None) -> DeploymentStep:
        """Run K/V arrivals that are due, then the earliest instance's step; nothing at or after
        `until` (the next planned arrival): the clock stops there, for the request arriving then."""
        outputs, self._undelivered = self._undelivered, []
        while (event := self._next_event()) is not None:
            time, is_step, index = event
            if until is not None and time >= until > self.now:  # (a horizon already passed is stale)
                break
            self.now = max(self.now, time)
            if not is_step:
                self._receive_kv(heapq.heappop(self._transfers)[2])
                continue
            step = self.cores[index].step()
            result = step.result
            outputs += [routed for output in result.outputs if (routed := self._routed(index, output))]
            if not self.has_unfinished():  # the last step's end is the run's
                self.now = max(engine.clock() for engine in self.instances)
            return DeploymentStep(outputs, self._stats(result.stats), result.scheduled, index, step.failure)
        if until is not None:
            self.now = max(self.now, until)
        return DeploymentStep(outputs, None, {}, None)

    def _routed(self, index: int, output: RequestOutput) -> RequestOutput | None:
        """An instance's output as the deployment's: a prefill instance's first token, which starts
        the K/V's transfer, or a decode instance's tokens after the first one."""
        request = self._requests.get(output.request_id)
        if request is None:  # aborted while its K/V was sent: reported already
            return None
        if self.roles[index] == BOTH:
            output.metrics.instance = index
        elif self.roles[index] == PREFILL:
            output.metrics.prefill_instance = index
            if output.finish_reason == "length" and request.params.max_tokens > 1:
                self._send_kv(output.request_id, request, output)
                return dataclasses.replace(output, finished=False, finish_reason=None, metrics=request.prefill)
        else:
            metrics = _joined(request.prefill, output.metrics)
            output = dataclasses.replace(output, token_ids=[request.first_token, *output.token_ids], metrics=metrics)
        if output.finished:
            self._end(output.request_id)
        return output

    def _send_kv(self, request_id: str, request: _Request, output: RequestOutput) -> None:
        """The prompt's K/V leaves its prefill instance for the least loaded decode instance, once
        both ends' links are free."""
        source = request.instance
        target = self._least_loaded(DECODE, self.now)
        start = max(output.metrics.first_token_time, self._link_free[source], self._link_free[target])
        ready = start + self.kv_transfer_s(len(request.prompt))
        self._link_free[source] = self._link_free[target] = ready
        prefill = dataclasses.replace(output.metrics, token_times=list(output.metrics.token_times))
        prefill.finish_reason = prefill.finish_time = None
        prefill.kv_transfer_start_time, prefill.kv_ready_time, prefill.instance = start, ready, target
        request.prefill, request.first_token = prefill, output.token_ids[0]
        self._load[source] -= 1
        self._load[target] += 1
        request.instance = target
        heapq.heappush(self._transfers, (ready, next(self._transfer_order), request_id))

    def _receive_kv(self, request_id: str) -> None:
        request = self._requests[request_id]
        request.arrived = True
        engine = self.instances[request.instance]
        ready = request.prefill.kv_ready_time
        self._bring_forward(request.instance, ready)
        engine.receive_kv(request.prompt)
        engine.add_request(
            [*request.prompt, request.first_token],
            dataclasses.replace(request.params, max_tokens=request.params.max_tokens - 1),
            arrival_time=ready,
            priority=request.priority,
            request_id=request_id,
        )

    def _end(self, request_id: str) -> None:
        request = self._requests.pop(request_id)
        self._load[request.instance] -= 1

    def _stats(self, stepped: StepStats) -> StepStats:
        """The deployment's state after one instance's step: that step's batch, every instance's
        KV blocks, queues and totals. Prefix-cache figures count the instances that take prompts
        (a decode instance's hits are K/V it was sent)."""
        engines = self.instances
        managers = [engine.block_manager for engine in engines]
        prompted = [engine.block_manager for engine, role in zip(engines, self.roles) if role != DECODE]
        return dataclasses.replace(
            stepped,
            kv_blocks_used=sum(manager.num_used_blocks for manager in managers),
            kv_blocks_total=sum(manager.num_blocks for manager in managers),
            kv_blocks_cached_free=sum(manager.num_cached_free_blocks for manager in managers),
            num_waiting=sum(len(engine.scheduler.waiting) for engine in engines),
            num_waiting_long=sum(len(engine.scheduler.waiting_long) for engine in engines),
            num_running=sum(len(engine.scheduler.running) for engine in engines),
            preemptions_total=sum(engine.scheduler.num_preemptions for engine in engines),
            rejections_total=sum(engine.num_rejections for engine in engines),
            prefix_cache_hit_tokens_total=sum(manager.prefix_hit_tokens for manager in prompted),
            prefix_cache_query_tokens_total=sum(manager.prefix_query_tokens for manager in prompted),
        )

    def close(self) -> None:
        for engine in self.instances:
            engine.close()


def _joined(prefill: RequestMetrics, decode: RequestMetrics) -> RequestMetrics:
    """One request's metrics from its prefill instance's (arrival to first token, and where its K/V
    went: `instance`, its decode instance) and that decode instance's (the tokens after the first)."""
    return dataclasses.replace(
        prefill,
        finish_time=decode.finish_time,
        token_times=prefill.token_times + decode.token_times,
        preemptions=prefill.preemptions + decode.preemptions,
        finish_reason=decode.finish_reason,
        finish_detail=decode.finish_detail,
        stop_cause=decode.stop_cause,
        decode_scheduled_time=decode.first_scheduled_time,
    )
