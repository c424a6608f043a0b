"""Quality in a decision's record: `quality/ppl:+1%`, `quality/kl:+0.02`, `quality/top1:-2pp`.

A decision may weigh what a configuration costs in quality beside what it buys in speed. Its
quality terms name one of `QUALITY_METRICS`, measured by `workbench quality`'s scoring
(workbench/quality/measure.py) on the variant's exact engine configuration against the model file's own
weights, on the same held-out text for every configuration. A run whose decision names a quality
term gets those figures in its report (`quality/ppl`, ...), read from the quality ledger when
this machine has scored that configuration of that file before, else scored now and recorded.

The scores are deterministic (the same tokens, the same weights): their interval has zero width
and says so; the text's own sampling error is not estimated.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.configuration.config import EngineConfig
from engine.errors import ConfigError
from engine.loading.model_file import ModelSource
from workbench.analysis.intervals import Interval
from workbench.analysis.report import QUALITY_PREFIX
from workbench.quality.ledger import configuration_key, measured_quality, record
from workbench.quality.measure import score_configuration

PREFIX = QUALITY_PREFIX
# Term name -> (ledger field, unit).
QUALITY_METRICS = {
    "ppl": ("perplexity", "perplexity on held-out ShareGPT replies"),
    "ppl_change": ("perplexity_change_perc", "% perplexity change against the file's own weights"),
    "kl": ("kl_divergence_mean_nats", "nats/token, KL(file's own weights || this configuration)"),
    "top1": ("top1_agreement_perc", "% of tokens whose most likely next token is the file's own weights'"),
}


def quality_metrics_named(terms: list[str]) -> list[str]:
    """The quality metrics (`ppl`, `kl`, ...) a decision's terms name; refuses unknown ones."""
    named = []
    for text in terms:
        metric = text.partition(":")[0].strip()
        if not metric.startswith(PREFIX):
            continue
        name = metric.removeprefix(PREFIX)
        if name not in QUALITY_METRICS:
            raise ConfigError(
                f"decision term {text!r}: no quality metric {name!r}; expected one of "
                f"{', '.join(PREFIX + known for known in QUALITY_METRICS)}"
            )
        named.append(name)
    return named


def refuse_on_a_server(terms: list[str], server: str) -> None:
    """A server's model cannot be scored here: its weights and logits are not ours to read."""
    for text in terms:
        if text.strip().startswith(PREFIX):
            raise ConfigError(
                f"decision term {text!r}: quality is scored on the in-process engine's weights; a run against "
                f"{server} cannot measure it (drop the term, or run the preset without --server)"
            )


def add_quality_figures(report_path: Path, source: ModelSource, config: EngineConfig, progress=print) -> dict:
    """Put the configuration's quality figures into the run's report.json (from the ledger, or
    scored now and recorded there); returns the updated report."""
    report = json.loads(report_path.read_text())
    versions = report["versions"]
    ran = (versions["quantization"], versions["dtype"], versions["kv_cache_dtype"])
    figures = measured_quality(source.path, *ran)
    if figures is None or "perplexity" not in figures:
        progress(f"scoring the quality of {configuration_key(*ran)} on the held-out text")
        figures = score_configuration(source, config)
        record(source.path, {figures.pop("configuration"): figures})
    tokens = figures["evaluated_tokens"]
    why = f"the same {tokens} held-out tokens for every configuration (no run-to-run noise)"
    for name, (field, unit) in QUALITY_METRICS.items():
        value = figures[field]
        report["metrics"][PREFIX + name] = {
            "value": value,
            "unit": unit,
            "n": tokens,
            "interval": Interval.exact(value, why).as_dict(),
        }
    report_path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    return report
