"""The quality ledger: what `workbench quality` measured, found again by model file and configuration."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from engine.errors import ConfigError
from workbench.quality.ledger import EXACT, check_ledger, configuration_key, quality_line, record

FIGURES = {
    "perplexity_change_perc": 0.2123,
    "kl_divergence_mean_nats": 0.00195,
    "top1_agreement_perc": 97.4,
    "evaluated_tokens": 4082,
}
DEFAULT = "int4 g32 + int8 head, bf16 copy from 8 rows"


def test_a_recorded_configuration_is_quoted_with_its_n_and_date(tmp_path):
    model, ledger = tmp_path / "model.gguf", tmp_path / "cache" / "quality.json"
    model.write_bytes(b"weights")
    record(model, {configuration_key(DEFAULT, "float32", "bfloat16"): FIGURES}, ledger)
    line = quality_line(model, "auto", DEFAULT, "float32", "bfloat16", ledger)
    assert line.startswith(
        "vs the file's own weights: perplexity +0.21%, KL 0.00195 nats/token, top-1 agreement 97.40% (n = 4,082 "
        "tokens, measured 20"
    )


def test_another_configuration_or_a_changed_file_is_not_measured_and_says_how_to_measure(tmp_path):
    model, ledger = tmp_path / "model.gguf", tmp_path / "quality.json"
    model.write_bytes(b"weights")
    record(model, {configuration_key(DEFAULT, "float32", "bfloat16"): FIGURES}, ledger)
    unmeasured = "quality cost not measured on this machine: run workbench quality --quant "
    assert quality_line(model, "auto", DEFAULT, "float32", "float32", ledger) == unmeasured + "auto"  # another KV dtype
    assert quality_line(model, "int8", "int8", "float32", "float32", ledger) == unmeasured + "int8"
    model.write_bytes(b"other weights")  # same name, new file
    assert quality_line(model, "auto", DEFAULT, "float32", "bfloat16", ledger) == unmeasured + "auto"


def test_unquantized_float32_is_exact_and_a_damaged_ledger_is_refused_naming_it_and_kept(tmp_path):
    """Issue 77 #11: a damaged ledger was read as empty, and the next measurement rewrote it with
    only its own rows."""
    model, ledger = tmp_path / "model.gguf", tmp_path / "quality.json"
    model.write_bytes(b"weights")
    assert quality_line(model, "none", "none", "float32", "float32", ledger) == EXACT
    for damaged in ("{not json", '["a list"]', '{"model": 3}', b"\xff\xfe"):
        ledger.write_bytes(damaged if isinstance(damaged, bytes) else damaged.encode())
        line = quality_line(model, "none", "none", "bfloat16", "bfloat16", ledger)
        assert line.startswith(f"quality cost unknown: {ledger}: not a quality ledger")
        with pytest.raises(ConfigError, match=f"{ledger}: not a quality ledger"):
            record(model, {configuration_key("none", "bfloat16", "bfloat16"): FIGURES}, ledger)
        with pytest.raises(ConfigError, match=f"{ledger}: not a quality ledger"):
            check_ledger(ledger)
        assert ledger.read_bytes() == (damaged if isinstance(damaged, bytes) else damaged.encode())


def _record_one(arguments) -> None:
    ledger, model, index = arguments
    record(model, {f"configuration {index}": FIGURES}, ledger)


def test_concurrent_writers_each_keep_their_entry(tmp_path):
    """Issue 77 #11: eight processes recording at once kept one entry (read, modify, write without
    a lock). Each now adds its own under the ledger's lock, and no reader sees half a file."""
    model, ledger = tmp_path / "model.gguf", tmp_path / "quality.json"
    model.write_bytes(b"weights")
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        pool.map(_record_one, [(ledger, model, index) for index in range(8)])
    (entries,) = json.loads(ledger.read_text()).values()
    assert sorted(entries) == [f"configuration {index}" for index in range(8)]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.gguf", "quality.json", "quality.json.lock"]
