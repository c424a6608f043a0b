"""Bad input gets the engine's own error, naming the file, key or value and what was expected."""

from __future__ import annotations

import json
import shutil

import pytest

from engine import ConfigError, EngineConfig, EngineError, LLMEngine, ModelLoadError, SamplingParams
from engine.configuration.config import INTEGER_BOUNDS
from engine.loading.model_source import resolve_model_path
from engine.settings import build
from tests.tiny_models import tiny_engine


def load(path):
    return LLMEngine(EngineConfig(model=str(path), device="cpu", num_kv_blocks=8))


def test_missing_path_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    with pytest.raises(ModelLoadError, match="no such file or directory") as error:
        load(missing)
    assert str(missing) in str(error.value)


def test_truncated_gguf_is_reported_as_truncated(tmp_path):
    truncated = tmp_path / "cut.gguf"
    with open(resolve_model_path("smollm2-135m"), "rb") as source:
        truncated.write_bytes(source.read(40 << 20))
    with pytest.raises(ModelLoadError, match="truncated") as error:
        load(truncated)
    assert str(truncated) in str(error.value)


def test_garbage_gguf_is_reported(tmp_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 100)
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        load(garbage)


def test_corrupt_safetensors_header_names_the_file(tmp_path, tiny_llama):
    directory, _ = tiny_llama
    broken = tmp_path / "broken"
    shutil.copytree(directory, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes((10**6).to_bytes(8, "little") + b"{ this is not json")
    with pytest.raises(ModelLoadError, match="not a readable safetensors file") as error:
        load(broken)
    assert str(weights) in str(error.value)


def test_unknown_architecture_lists_the_supported_ones(tmp_path, tiny_llama):
    directory, _ = tiny_llama
    other = tmp_path / "other"
    shutil.copytree(directory, other)
    config = json.loads((other / "config.json").read_text())
    config["model_type"] = "gpt_neox"
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="'gpt_neox' is not supported; expected one of llama, mistral, qwen2"):
        load(other)


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type 'yarn' is not supported"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic' is not supported"),
        (
            {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}},
            r"rope_scaling \(llama3\) is missing 'high_freq_factor'",
        ),
        ({"rope_scaling": {"rope_type": "linear"}}, r"rope_scaling \(linear\) is missing 'factor'"),
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping = 30.0 is not supported"),
        ({"num_local_experts": 8}, "num_local_experts = 8 is not supported"),
        ({"kv_lora_rank": 512}, "kv_lora_rank = 512 is not supported"),
    ],
)
def test_what_the_decoder_does_not_implement_is_refused_by_name(tmp_path, tiny_llama, setting, message):
    directory, _ = tiny_llama
    other = tmp_path / "other"
    shutil.copytree(directory, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, **setting}))
    with pytest.raises(ModelLoadError, match=message) as error:
        load(other)
    assert str(other / "config.json") in str(error.value)


def test_pickle_checkpoints_are_refused_not_unpickled(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04 pickle bytes that must never be loaded")
    with pytest.raises(ModelLoadError, match="never unpickled"):
        load(tmp_path)


def test_missing_config_key_is_named(tmp_path, tiny_llama):
    directory, _ = tiny_llama
    other = tmp_path / "other"
    shutil.copytree(directory, other)
    config = json.loads((other / "config.json").read_text())
    del config["hidden_size"]
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="'hidden_size' is missing"):
        load(other)


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"block_size": 0}, "block_size: expected an integer from 1 to 65,536, got 0"),
        ({"max_num_seqs": "8"}, "max_num_seqs: expected an integer, got '8'"),
        ({"kv_cache_memory": 1.5}, r"kv_cache_memory: a fraction must be in \(0, 1\]"),
        ({"scheduling_policy": "lifo"}, "scheduling_policy: expected one of fcfs, priority, got 'lifo'"),
        ({"dtype": "int3"}, "dtype: expected one of"),
        ({"device": "tpu"}, "device: expected 'auto', 'cpu' or 'cuda"),
        (
            {"kv_cache_dtype": "fp8_e5m2"},
            "kv_cache_dtype: expected one of auto, float32, bfloat16, float16, int8, fp8_e4m3, got 'fp8_e5m2'",
        ),
        ({"compile_decode": "later"}, "compile_decode: expected one of background, blocking, off, got 'later'"),
    ],
)
def test_bad_config_values_name_the_key(settings, message):
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**settings)


@pytest.mark.parametrize("name", sorted(INTEGER_BOUNDS))
def test_every_integer_setting_is_refused_past_its_bounds_naming_them(name):
    """Issue 77 #7, #8: past 64 bits a setting reached torch as an OverflowError at load, and a
    prompt_lookup_max of 10^6 made every decode step take seconds. Each bound itself is accepted."""
    minimum, maximum = INTEGER_BOUNDS[name]
    related = {
        "prompt_lookup_min": {"prompt_lookup_max": 64},
        "prompt_lookup_max": {"prompt_lookup_min": 1},
        "prefill_instances": {"data_parallel_size": 4096},
    }.get(name, {})
    for accepted in (minimum, maximum):
        if not (name == "prefill_instances" and accepted == 4096):  # one instance must be left to decode
            EngineConfig(**{**related, name: accepted})
    for refused in (minimum - 1, maximum + 1, 1 << 64, 10**400):
        with pytest.raises(ConfigError, match=rf"^{name}: expected an integer from {minimum} to {maximum:,}, got "):
            EngineConfig(**{**related, name: refused})


@pytest.mark.parametrize("name", ["simulation_speed", "long_prompt_max_wait_s", "draft_acceptance_rate"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0, 1e300, 10**400])
def test_every_number_setting_is_refused_past_its_bounds(name, value):
    with pytest.raises(ConfigError, match=rf"^{name}: expected a number"):
        EngineConfig(**{name: value})


def test_a_400_digit_number_for_a_float_setting_is_refused_in_one_line():
    with pytest.raises(
        ConfigError, match="preset: engine.simulation_speed: expected a finite number, got an integer of 400"
    ):
        build(EngineConfig, {"simulation_speed": int("9" * 400)}, "preset", "engine")


def test_a_float16_cache_on_the_cpu_is_refused_at_load_naming_the_setting(tiny_llama):
    """Issue 77 #9: `--help` offers float16, and the CPU attention operator refused it with a
    RuntimeError once the model had loaded."""
    directory, _ = tiny_llama
    for settings in ({"kv_cache_dtype": "float16"}, {"dtype": "float16"}):
        with pytest.raises(ConfigError, match=r"kv_cache_dtype: the CPU's attention reads .* not float16"):
            LLMEngine(EngineConfig(model=str(directory), device="cpu", **settings))


def test_compile_decode_reads_older_presets_booleans_and_its_default_from_the_environment(monkeypatch):
    assert EngineConfig(compile_decode=True).compile_decode == "blocking"
    assert EngineConfig(compile_decode=False).compile_decode == "off"
    monkeypatch.setenv("WORKBENCH_COMPILE_DECODE", "background")
    assert EngineConfig().compile_decode == "background"
    monkeypatch.setenv("WORKBENCH_COMPILE_DECODE", "soon")
    with pytest.raises(
        ConfigError, match=r"compile_decode: expected one of .*, got 'soon' \(from \$WORKBENCH_COMPILE_DECODE\)"
    ):
        EngineConfig()


def test_cache_smaller_than_one_block_is_explained(tiny_llama):
    directory, _ = tiny_llama
    with pytest.raises(ConfigError, match="cannot hold one KV block"):
        LLMEngine(EngineConfig(model=str(directory), device="cpu", kv_cache_memory=10))


def test_bad_requests_are_refused_before_they_enter_the_engine(tiny_llama):
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    with pytest.raises(EngineError, match=r"token ids must be integers in \[0, 96\), got \[96, -1\]"):
        engine.add_request([1, 96, -1])
    with pytest.raises(EngineError, match="has no tokenizer"):
        engine.add_request("text needs a tokenizer")
    with pytest.raises(ConfigError, match="top_p"):
        SamplingParams(top_p=0.0)
    engine.add_request([1, 2], request_id="dup")
    with pytest.raises(EngineError, match="'dup' is already in use"):
        engine.add_request([1, 2], request_id="dup")


def test_what_a_step_could_not_use_is_refused_by_add_request(tiny_llama):
    """top_k beyond the vocabulary (torch.topk overflowed mid-step for 2**63), an arrival in the
    future (a TTFT of -1e12 ms), and an id whose abort is not yet delivered (one id got an abort
    end, then new tokens)."""
    directory, _ = tiny_llama
    engine = tiny_engine(directory)
    with pytest.raises(
        EngineError, match=r"top_k: expected at most the vocabulary size \(96\), got 9223372036854775808"
    ):
        engine.add_request([1, 2], SamplingParams(top_k=2**63))
    engine.add_request([1, 2], SamplingParams(top_k=96, max_tokens=2))  # the whole vocabulary is fine
    with pytest.raises(EngineError, match="arrival_time: expected .* no later than now"):
        engine.add_request([1, 2], arrival_time=engine.clock() + 1e9)
    engine.add_request([1, 2], request_id="reused")
    engine.abort("reused")
    with pytest.raises(EngineError, match="'reused' is already in use by a request whose end has not been delivered"):
        engine.add_request([1, 2], request_id="reused")
    ends = [output for output in engine.step().outputs if output.request_id == "reused"]
    assert [(output.finished, output.finish_reason) for output in ends] == [(True, "abort")]
    engine.add_request([1, 2], request_id="reused")  # delivered: the id is free again
    while engine.has_unfinished():
        engine.step()
