"""What several commands share: argument types that refuse bad numbers with the value named, the
options of a command that drives a server, and the backend a run of a scenario gets from them."""

from __future__ import annotations

import argparse


def at_least(kind: type, minimum: float, inclusive: bool = True):
    """An argparse type: a number of this kind, at least (or above) the minimum."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if value < minimum or (value == minimum and not inclusive) or value != value:
            raise argparse.ArgumentTypeError(
                f"expected {'at least' if inclusive else 'more than'} {minimum:g}, got {text}"
            )
        return value

    return parse


def add_set_option(command: argparse.ArgumentParser, help: str, metavar: str = "TABLE.KEY=VALUE") -> None:
    """`--set KEY=VALUE`, repeatable, into `overrides` (engine keys: docs/knobs.md)."""
    command.add_argument("--set", dest="overrides", action="append", default=[], metavar=metavar, help=help)


def add_engine_options(command: argparse.ArgumentParser) -> None:
    """`--preset`, `--model`, `--kv-cache-dtype`, `--speculative-config` and `--set engine.KEY=VALUE`: the
    engine of a command that runs one (serve, compile), read by `engine_config`."""
    command.add_argument("--preset", help="take the engine settings from this preset")
    command.add_argument(
        "--model", help="the model (short for --set engine.model=MODEL): smollm2-135m, gemma3-270m or a path"
    )
    command.add_argument(
        "--kv-cache-dtype",
        help="the KV cache's dtype, as vLLM's flag (short for --set engine.kv_cache_dtype=DTYPE): auto, float32, "
        "bfloat16, float16, int8 or fp8_e4m3",
    )
    command.add_argument(
        "--speculative-config",
        help="speculative decoding, as vLLM's flag: a JSON object with method (ngram, or draft on a simulated GPU), "
        "num_speculative_tokens, prompt_lookup_max, prompt_lookup_min (draft: draft_acceptance_rate, "
        "draft_cost_fraction); docs/speculation.md",
    )
    add_set_option(
        command,
        "an engine setting, e.g. engine.model=simulated:llama-2-7b@h100-80gb (every key: docs/knobs.md)",
        metavar="engine.KEY=VALUE",
    )


def engine_config(args):
    """The EngineConfig of `add_engine_options`' arguments: the preset's [engine] with the --set
    keys over it, or the defaults with them."""
    from engine import EngineConfig
    from engine.errors import ConfigError
    from engine.settings import apply_override, build
    from workbench.traffic.presets import load_preset

    shorthands = {"model": args.model, "kv_cache_dtype": args.kv_cache_dtype}
    overrides = [*args.overrides, *(f"engine.{key}={value}" for key, value in shorthands.items() if value is not None)]
    if args.speculative_config is not None:
        overrides += speculative_overrides(args.speculative_config)
    if args.preset:
        return load_preset(args.preset, overrides).engine
    raw: dict = {}
    for assignment in overrides:
        apply_override(raw, assignment)
    if others := sorted(set(raw) - {"engine"}):
        raise ConfigError(f"--set: {args.command} takes engine.KEY=VALUE settings only, got {', '.join(others)}")
    return build(EngineConfig, raw.get("engine", {}), "--set", "engine")


# vLLM's speculative_config keys the engine takes, and the setting each sets.
SPECULATIVE_CONFIG_KEYS = {
    "method": "speculative_method",
    "num_speculative_tokens": "num_speculative_tokens",
    "prompt_lookup_max": "prompt_lookup_max",
    "prompt_lookup_min": "prompt_lookup_min",
    "draft_acceptance_rate": "draft_acceptance_rate",
    "draft_cost_fraction": "draft_cost_fraction",
}


def speculative_overrides(text: str) -> list[str]:
    """`--speculative-config`'s JSON as engine.KEY=VALUE settings (each value then checked by
    EngineConfig)."""
    import json

    from engine.errors import ConfigError

    try:
        settings = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"--speculative-config: expected a JSON object, got {text!r} ({error.msg})") from None
    if not isinstance(settings, dict):
        raise ConfigError(f"--speculative-config: expected a JSON object, got {text!r}")
    if unknown := sorted(set(settings) - set(SPECULATIVE_CONFIG_KEYS)):
        raise ConfigError(
            f"--speculative-config: unknown keys {', '.join(unknown)}; expected some of "
            f"{', '.join(SPECULATIVE_CONFIG_KEYS)}"
        )
    if "method" not in settings:  # as vLLM: without one, '{}' or only counts left speculation off, unsaid
        raise ConfigError(f'--speculative-config: expected a "method" (ngram; draft on a simulated GPU), got {text!r}')
    return [f"engine.{SPECULATIVE_CONFIG_KEYS[key]}={json.dumps(value)}" for key, value in settings.items()]


def read_run_for(run, with_traces: bool):
    """(the run.jsonl path, the log) of a run folder or a run.jsonl given on the command line; a
    damaged line is said on stderr, the rest is read."""
    import sys

    from workbench.runs.run_log import read_run_log
    from workbench.runs.run_recorder import RUN_LOG_NAME

    path = run / RUN_LOG_NAME if run.is_dir() else run
    log = read_run_log(path, with_traces=with_traces)
    if log.skipped_lines:
        print(f"workbench: {log.skipped_summary(path)}", file=sys.stderr)
    return path, log


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535."""
    port = at_least(int, 1)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 1 to 65535, got {text}")
    return port


def add_server_model_options(command: argparse.ArgumentParser) -> None:
    from workbench.backends.loader import SERVER_TOKENIZER
    from workbench.backends.remote import DEFAULT_REQUEST_TIMEOUT_S

    command.add_argument(
        "--served-model", metavar="NAME", help="with --server: the model to ask for (default: the first in /v1/models)"
    )
    command.add_argument(
        "--tokenizer",
        metavar="MODEL",
        default=SERVER_TOKENIZER,
        help="with --server: the served model's tokenizer (a .gguf file or Hugging Face folder), to make prompts",
    )
    command.add_argument(
        "--request-timeout",
        type=at_least(float, 0.0, inclusive=False),
        default=DEFAULT_REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help="with --server: end a request with an error when the server sends nothing "
        f"for this long (default: {DEFAULT_REQUEST_TIMEOUT_S:g})",
    )


def backend_factory(args, base):
    """(make_backend, source): a function giving a fresh backend for each scenario run from these
    arguments (the server at --server, or the in-process engine of the scenario's [engine]
    table), and the model file read once for the in-process runs (None for a server or a
    simulated GPU). `base` is the scenario whose model the runs share."""
    from engine.loading.model_source import read_model
    from engine.simulation import is_simulated
    from workbench.backends.loader import server_tokenizer
    from workbench.backends.local import in_process_backend
    from workbench.backends.remote import RemoteBackend

    if args.server:
        tokenizer = server_tokenizer(args.tokenizer)

        def remote(scenario):
            return RemoteBackend(
                args.server, tokenizer, model=args.served_model, request_timeout_s=args.request_timeout
            )

        return remote, None
    source = None if is_simulated(base.engine.model) else read_model(base.engine.model)
    return (lambda scenario: in_process_backend(scenario.engine, source)), source
