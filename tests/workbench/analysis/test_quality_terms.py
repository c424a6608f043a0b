"""Quality in the decision record: a preset whose decision names quality terms gets each arm's
quality figures in its report (scored on the arm's exact configuration, then read from the
ledger), and the terms are judged with the speed terms; bad quality terms are refused first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import ConfigError
from tests.tiny_gguf import save_tiny_gguf
from tests.workbench.tiny_runs import arms_preset
from workbench.analysis.compare import Criterion
from workbench.cli import main
from workbench.quality.ledger import ledger_path, model_key


@pytest.fixture
def tiny_gguf(tmp_path, tiny_llama):
    """The tiny model as a GGUF file: it has a tokenizer (single characters) to cut held-out text with."""
    _, model = tiny_llama
    path = tmp_path / "tiny.gguf"
    save_tiny_gguf(path, model, "llama")
    return path


def preset_with(tmp_path, directory, tolerated: str) -> str:
    path = Path(arms_preset(tmp_path, directory))
    path.write_text(path.read_text().replace('tolerated = ["ttft_p99_ms:+1000%"]', f"tolerated = {tolerated}"))
    return str(path)


def test_quality_terms_put_each_arms_quality_in_its_report_and_in_the_verdict(tmp_path, tiny_gguf, capsys):
    preset = preset_with(tmp_path, tiny_gguf, '["quality/kl:+1", "quality/top1:-50pp", "quality/ppl:+50%"]')
    out = tmp_path / "out"
    assert main(["bench", "--preset", preset, "--out", str(out), "--no-plots"]) == 0
    assert "scoring the quality of" in capsys.readouterr().err
    plain, int8 = (json.loads((out / name / "report.json").read_text())["metrics"] for name in ("plain", "int8"))
    # The float32 arm is the file's own weights: no divergence, every top-1 agrees.
    assert plain["quality/kl"]["value"] == pytest.approx(0.0, abs=1e-6) and plain["quality/top1"]["value"] == 100.0
    assert 0 < int8["quality/kl"]["value"] < 1 and int8["quality/top1"]["value"] <= 100.0
    assert int8["quality/ppl"]["n"] == plain["quality/ppl"]["n"] > 1000  # tokens of the same held-out text
    assert int8["quality/ppl"]["interval"]["method"].startswith("deterministic: the same")
    comparison = json.loads((out / "comparison.json").read_text())
    statuses = {check["criterion"]: check["status"] for check in comparison["checks"]}
    assert statuses == {
        "goodput_perc:+10": "uncertain",  # 6 requests an arm: Newcombe's interval holds +10 points
        "quality/kl:+1": "within",
        "quality/top1:-50pp": "within",
        "quality/ppl:+50%": "within",
    }
    recorded = json.loads(ledger_path().read_text())[model_key(tiny_gguf)]
    assert len(recorded) == 2  # both arms' configurations of the one model file
    # A second bench reads the ledger instead of scoring again.
    assert main(["bench", "--preset", preset, "--out", str(tmp_path / "again"), "--no-plots"]) == 0
    assert "scoring the quality of" not in capsys.readouterr().err


def test_an_unknown_quality_metric_is_refused_before_any_run(tmp_path, tiny_llama, capsys):
    directory, _ = tiny_llama
    preset = preset_with(tmp_path, directory, '["quality/bleu:-1%"]')
    assert main(["bench", "--preset", preset, "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "decision term 'quality/bleu:-1%': no quality metric 'bleu'; expected one of quality/ppl" in error
    assert not (tmp_path / "out").exists()


def test_a_model_without_a_tokenizer_cannot_score_quality_and_says_so(tmp_path, tiny_llama, capsys):
    directory, _ = tiny_llama  # safetensors without tokenizer files
    preset = preset_with(tmp_path, directory, '["quality/kl:+0.1"]')
    assert main(["bench", "--preset", preset, "--out", str(tmp_path / "out")]) == 2
    assert "quality terms score held-out text, which needs the model's tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_quality_term_against_a_server_is_refused_with_the_term(tmp_path, tiny_llama, capsys):
    directory, _ = tiny_llama
    preset = preset_with(tmp_path, directory, '["quality/kl:+0.1"]')
    command = ["bench", "--preset", preset, "--out", str(tmp_path / "out"), "--server", "http://127.0.0.1:9"]
    assert main([*command, "--tokenizer", str(directory)]) == 2
    error = capsys.readouterr().err
    assert "decision term 'quality/kl:+0.1': quality is scored on the in-process engine's weights" in error


def test_percentage_points_are_an_absolute_change_and_keep_their_unit():
    assert Criterion.parse("quality/top1:-2pp") == Criterion("quality/top1", -2.0, False, True)
    assert str(Criterion.parse("quality/top1:-2pp")) == "quality/top1:-2pp"
    with pytest.raises(ConfigError, match="METRIC:-Npp"):
        Criterion.parse("quality/top1:-2points")
