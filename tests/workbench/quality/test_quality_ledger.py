"""The quality ledger: what `workbench quality` measured, found again by model file and configuration."""

from __future__ import annotations

from workbench.quality.ledger import EXACT, configuration_key, quality_line, record

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


def test_unquantized_float32_is_exact_and_a_damaged_ledger_reads_as_unmeasured(tmp_path):
    model, ledger = tmp_path / "model.gguf", tmp_path / "quality.json"
    model.write_bytes(b"weights")
    assert quality_line(model, "none", "none", "float32", "float32", ledger) == EXACT
    ledger.write_text("{not json")
    assert quality_line(model, "none", "none", "bfloat16", "bfloat16", ledger).startswith("quality cost not measured")
    record(model, {configuration_key("none", "bfloat16", "bfloat16"): FIGURES}, ledger)  # rewrites it
    assert "perplexity +0.21%" in quality_line(model, "none", "none", "bfloat16", "bfloat16", ledger)
