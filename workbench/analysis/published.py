"""Published serving runs as the simulated GPUs' yardstick (issue 59): the corpus in
presets/published/corpus.toml, each run replayed on a simulated engine with the serving stack it
ran, and the error of every figure.

A run is replayed here with the engine alone on its simulated clock, not through `bench`: the
published figures are the serving benchmarks' own (vLLM's and SGLang's `bench_serving`, LMDeploy's
`profile_generation`), so they are computed as those compute them:
- output_tok_s: output tokens / (last request's end - first request's arrival);
- ttft_p50_ms: the median over requests of first token - arrival;
- tpot_p50_ms: the median over requests of more than one token of (end - first token) / (tokens - 1);
- itl_p50_ms: the median of every gap between a request's consecutive tokens.

Each stack's runs are split by a fixed rule, not by hand: sorted by id, every third is held out,
the others fit its fitted parts (workbench/analysis/published_fit.py)."""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
import math
import multiprocessing
import os
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine import EngineConfig, LLMEngine, SamplingParams
from engine.core import EngineCore
from engine.errors import ConfigError
from engine.simulation.serving_stacks import STACKS_FILE, ServingStack, serving_stack, stack_names
from engine.simulation.target import target_name
from workbench.analysis.stated_error import FIGURE_KINDS, METRIC_KINDS, Region, load_of
from workbench.traffic.arrivals import ARRIVALS
from workbench.traffic.profile import TrafficProfile

PRESETS = Path(str(importlib.resources.files("presets")))
CORPUS_FILE = PRESETS / "published" / "corpus.toml"
SHAREGPT_LENGTHS = PRESETS / "traces" / "lambda-vllm-benchmark-2024" / "sharegpt-320.csv"
METRICS = ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms")
REQUEST_KINDS = ("sharegpt", "lambda-sharegpt-320", "fixed")
SEED = 0


@dataclass(frozen=True)
class PublishedRun:
    id: str
    source: str
    stack: str
    model: str
    hardware: str
    requests: str
    num_requests: int
    figures: dict[str, float]
    tensor_parallel_size: int = 1
    rate: float = 0.0  # requests/s, Poisson; 0 with concurrency 0: every request at once
    concurrency: int = 0  # clients each sending their next request when one ends
    prompt_tokens: int = 0  # requests = "fixed"
    output_tokens: int = 0
    engine: dict = field(default_factory=dict)

    def check(self, where: str) -> None:
        if self.requests not in REQUEST_KINDS:
            raise ConfigError(f"{where}: requests: expected one of {', '.join(REQUEST_KINDS)}, got {self.requests!r}")
        if self.requests == "fixed" and (self.prompt_tokens < 1 or self.output_tokens < 1):
            raise ConfigError(f"{where}: requests = 'fixed' needs prompt_tokens and output_tokens >= 1")
        if self.rate and self.concurrency:
            raise ConfigError(f"{where}: rate and concurrency: set one, not both")
        if not self.figures or set(self.figures) - set(METRICS):
            raise ConfigError(f"{where}: figures: expected some of {', '.join(METRICS)}, got {sorted(self.figures)}")

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            model=target_name(self.model, self.hardware),
            tensor_parallel_size=self.tensor_parallel_size,
            serving_stack=self.stack,
            enable_prefix_caching=False,  # off in every published run (vLLM's default then; SGLang's disabled)
            long_prompt_threshold=0,  # no serving engine of these runs has a long-prompt queue
            **self.engine,
        )


@dataclass(frozen=True)
class Corpus:
    sources: dict[str, dict]
    runs: tuple[PublishedRun, ...]

    def stacks(self) -> list[str]:
        return sorted({run.stack for run in self.runs})

    def runs_of(self, stack: str) -> list[PublishedRun]:
        return sorted((run for run in self.runs if run.stack == stack), key=lambda run: run.id)

    def held_out(self, run: PublishedRun) -> bool:
        """Every third of its stack's runs, by id, and every run of a stack with no fitted part
        (its sources give every value): the fit never sees them."""
        if not any(part.fitted for part in serving_stack(run.stack).parts().values()):
            return True
        return self.runs_of(run.stack).index(run) % 3 == 2


def load_corpus(path: Path = CORPUS_FILE) -> Corpus:
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the corpus ({exc})") from exc
    sources = table.get("sources", {})
    for name, source in sources.items():
        if not (isinstance(source, dict) and source.get("title") and str(source.get("url", "")).startswith("https://")):
            raise ConfigError(f"{path}: sources.{name}: expected a title and an https:// url, got {source!r}")
    runs = []
    known = {entry.name for entry in dataclasses.fields(PublishedRun)}
    for index, entry in enumerate(table.get("runs", [])):
        where = f"{path}, runs[{index}] ({entry.get('id', '?')})"
        if unknown := set(entry) - known:
            raise ConfigError(f"{where}: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
        try:
            run = PublishedRun(**entry)
        except TypeError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        run.check(where)
        if run.source not in sources:
            raise ConfigError(
                f"{where}: source {run.source!r} is not under [sources]; expected one of {sorted(sources)}"
            )
        if run.stack not in stack_names():
            raise ConfigError(f"{where}: stack {run.stack!r} is not in {STACKS_FILE}; expected one of {stack_names()}")
        runs.append(run)
    if len({run.id for run in runs}) != len(runs):
        raise ConfigError(f"{path}: run ids must be unique")
    return Corpus(sources, tuple(runs))


def _sharegpt_lengths() -> list[tuple[int, int]]:
    with SHAREGPT_LENGTHS.open() as file:
        return [(int(row["num_prefill_tokens"]), max(1, int(row["num_decode_tokens"]))) for row in csv.DictReader(file)]


def request_lengths(run: PublishedRun, rng: np.random.Generator) -> list[tuple[int, int]]:
    """(prompt tokens, output tokens) of each request, in the order sent. A request that
    generated nothing in the recorded run asks for one token."""
    if run.requests == "fixed":
        return [(run.prompt_tokens, run.output_tokens)] * run.num_requests
    lengths = _sharegpt_lengths()
    if run.requests == "lambda-sharegpt-320":
        return lengths[: run.num_requests]
    return [lengths[index] for index in rng.integers(0, len(lengths), run.num_requests)]


def simulate(
    run: PublishedRun, stack: ServingStack | None = None, hardware: dict[str, float] | None = None
) -> dict[str, float]:
    """The run on its simulated GPUs: its figures, computed as the benchmark that published them
    does, and its load (`load_of`). `stack`: these costs instead of the named stack's; `hardware`:
    these values of the GPU's profile instead of the catalogue's (a fit trying values)."""
    engine = LLMEngine(run.engine_config())
    core = EngineCore(engine)
    cost_model = engine.executor.cost_model
    if stack is not None:
        cost_model.stack = stack
    if hardware:
        cost_model.hardware = dataclasses.replace(cost_model.hardware, **hardware)
    rng = np.random.default_rng(SEED)
    vocab = engine.model_config.vocab_size
    lengths = request_lengths(run, rng)
    if run.concurrency:
        arrivals = [0.0] * min(run.concurrency, len(lengths))
    elif run.rate:  # the traffic registry's Poisson gaps, stretched by the rate
        poisson = TrafficProfile(arrival="poisson", rate=run.rate)
        gaps = ARRIVALS[poisson.arrival].unit_gaps(poisson, rng, len(lengths)) * (1 / run.rate)
        arrivals = list(np.cumsum(gaps))
    else:
        arrivals = [0.0] * len(lengths)
    sent, finished, steps = 0, [], []

    def send(at: float) -> None:
        nonlocal sent
        prompt, output = lengths[sent]
        engine.add_request(
            [int(token) for token in rng.integers(3, vocab, prompt)],
            SamplingParams(max_tokens=output, ignore_eos=True, temperature=0.0),
            arrival_time=at,
        )
        sent += 1

    while sent < len(lengths) or engine.has_unfinished():
        now = engine.clock()
        while sent < len(arrivals) and arrivals[sent] <= now:
            send(arrivals[sent])
        if not engine.has_unfinished():
            engine.sleep(arrivals[sent] - now)
            continue
        result = core.step_or_raise()
        steps.append(result.stats)
        for output in result.outputs:
            if output.finished:
                finished.append(output.metrics)
                if run.concurrency and len(arrivals) < len(lengths):
                    arrivals.append(engine.clock())
    return {**figures_of(finished), "load": load_of(steps, engine.config.max_num_seqs)}


def figures_of(requests) -> dict[str, float]:
    start = min(request.arrival_time for request in requests)
    end = max(request.finish_time for request in requests)
    tokens = sum(request.num_output_tokens for request in requests)
    ttfts = [request.first_token_time - request.arrival_time for request in requests]
    tpots = [
        (request.finish_time - request.first_token_time) / (request.num_output_tokens - 1)
        for request in requests
        if request.num_output_tokens > 1
    ]
    gaps = [
        later - earlier for request in requests for earlier, later in zip(request.token_times, request.token_times[1:])
    ]
    return {
        "output_tok_s": tokens / (end - start),
        "ttft_p50_ms": 1000 * float(statistics.median(ttfts)),
        "tpot_p50_ms": 1000 * float(statistics.median(tpots)) if tpots else math.nan,
        # Beside the published kinds: the mean TPOT and its n (benchmarks/stack_defaults.py).
        "tpot_mean_ms": 1000 * statistics.fmean(tpots) if tpots else math.nan,
        "tpot_n": len(tpots),
        "itl_p50_ms": 1000 * float(statistics.median(gaps)) if gaps else math.nan,
    }


@dataclass(frozen=True)
class FigureError:
    run: PublishedRun
    metric: str
    published: float
    ours: float
    held_out: bool
    region: Region

    @property
    def error_perc(self) -> float:
        return 100.0 * (self.ours / self.published - 1.0)


def errors_of(
    corpus: Corpus, runs, stacks: dict[str, ServingStack] | None = None, hardware: dict[str, float] | None = None
) -> list[FigureError]:
    """Every figure of `runs`, simulated with `stacks` (by name; else each run's named stack) and
    `hardware` (else the catalogue's), the runs shared out over the machine's cores."""
    jobs = [(run, (stacks or {}).get(run.stack), hardware) for run in runs]
    with multiprocessing.get_context("spawn").Pool(min(len(jobs), os.cpu_count() or 1)) as pool:
        results = pool.starmap(simulate, jobs)
    return [
        FigureError(
            run, metric, published, ours[metric], corpus.held_out(run), Region.of(run.engine_config(), ours["load"])
        )
        for run, ours in zip(runs, results)
        for metric, published in run.figures.items()
    ]


def loss_of(rows: list[FigureError]) -> float:
    """The mean |log(ours / published)|: a figure twice too high costs what one half too low does."""
    return statistics.fmean(abs(math.log(row.ours / row.published)) for row in rows)


@dataclass(frozen=True)
class ErrorSummary:
    kind: str
    held_out: bool
    n: int
    median_abs_perc: float
    worst_abs_perc: float


def summarise(rows: list[FigureError]) -> list[ErrorSummary]:
    """Median and worst |error| per kind of figure, over the fitted and the held-out figures apart."""
    summaries = []
    for kind in FIGURE_KINDS:
        for held_out in (False, True):
            errors = [
                abs(row.error_perc) for row in rows if METRIC_KINDS[row.metric] == kind and row.held_out == held_out
            ]
            if errors:
                summaries.append(ErrorSummary(kind, held_out, len(errors), statistics.median(errors), max(errors)))
    return summaries


def format_table(rows: list[FigureError]) -> str:
    """docs/memory.md's table: every figure, then the summary per kind."""
    lines = [
        "| run | stack | figure | published | simulated | error | |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda row: (row.run.stack, row.run.id, row.metric)):
        lines.append(
            f"| {row.run.id} | {row.run.stack} | {row.metric} | {row.published:,.2f} | {row.ours:,.2f} | "
            f"{row.error_perc:+.1f}% | {'held out' if row.held_out else 'fitted'} |"
        )
    lines += ["", "| figures | of | n | median abs. error | worst |", "|---|---|---|---|---|"]
    for summary in summarise(rows):
        lines.append(
            f"| {summary.kind} | {'held out' if summary.held_out else 'fitted'} | {summary.n} | "
            f"{summary.median_abs_perc:.1f}% | {summary.worst_abs_perc:.1f}% |"
        )
    return "\n".join(lines)


def errors_toml(rows: list[FigureError]) -> str:
    """presets/published/errors.toml: each figure's error as last measured, which reports quote
    and the suite holds the cost model to."""
    lines = [
        "# Written by `workbench calibrate --published --errors-out presets/published/errors.toml`: each",
        "# published figure, the simulator's, and the error, as last measured. Reports quote the errors",
        "# of a run's stack (simulated_error); tests/workbench/analysis/test_published_figures.py holds",
        "# the simulator to them.",
    ]
    for row in sorted(rows, key=lambda row: (row.run.id, row.metric)):
        lines += [
            "",
            "[[figures]]",
            f'run = "{row.run.id}"',
            f'stack = "{row.run.stack}"',
            f'metric = "{row.metric}"',
            f"published = {row.published!r}",
            f"simulated = {round(row.ours, 4)!r}",
            f"error_perc = {round(row.error_perc, 2)!r}",
            f"held_out = {'true' if row.held_out else 'false'}",
            f"tensor_parallel = {str(row.region.tensor_parallel).lower()}",
            f"multi_step = {str(row.region.multi_step).lower()}",
            f"chunked_prefill = {str(row.region.chunked_prefill).lower()}",
            f'load = "{row.region.load}"',
        ]
    return "\n".join(lines) + "\n"
