"""`workbench serve`: the engine behind an OpenAI-compatible HTTP API with vLLM's metrics."""

from __future__ import annotations

from workbench.cli.arguments import add_set_option, at_least, port_number
from workbench.server import DEFAULT_MAX_REQUEST_BYTES


def add_to(commands) -> None:
    serve = commands.add_parser("serve", help="serve the engine over an OpenAI-compatible HTTP API with vLLM's metrics")
    serve.add_argument("--preset", help="take the engine settings from this preset")
    serve.add_argument(
        "--model", help="the model to serve (short for --set engine.model=MODEL): smollm2-135m, gemma3-270m or a path"
    )
    add_set_option(
        serve,
        "an engine setting, e.g. engine.model=simulated:llama-2-7b@h100-80gb (every key: docs/knobs.md)",
        metavar="engine.KEY=VALUE",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    serve.add_argument("--port", type=port_number, default=8000)
    serve.add_argument("--served-model-name", help="the model's name in /v1/models (default: from engine.model)")
    serve.add_argument(
        "--max-request-bytes",
        type=at_least(int, 1),
        default=DEFAULT_MAX_REQUEST_BYTES,
        metavar="BYTES",
        help=f"refuse request bodies larger than this with 413 (default: {DEFAULT_MAX_REQUEST_BYTES:,})",
    )
    serve.add_argument(
        "--reserved-cpus",
        type=at_least(int, 0),
        default=0,
        metavar="N",
        help="cores the engine's compute threads leave to the HTTP server and clients on the same machine "
        "(as vLLM's VLLM_CPU_NUM_OF_RESERVED_CPU; default 0); the engine keeps at least one thread",
    )
    serve.set_defaults(handler=run)


def run(args) -> int:
    from engine import EngineConfig
    from engine.errors import ConfigError
    from engine.settings import apply_override, build
    from workbench.presets import load_preset
    from workbench.server.run import serve

    if args.model is not None:
        args.overrides = [*args.overrides, f"engine.model={args.model}"]
    if args.preset:
        config = load_preset(args.preset, args.overrides).engine
    else:
        raw: dict = {}
        for assignment in args.overrides:
            apply_override(raw, assignment)
        if set(raw) - {"engine"}:
            raise ConfigError(
                f"--set: serve takes engine.KEY=VALUE settings only, got {', '.join(sorted(set(raw) - {'engine'}))}"
            )
        config = build(EngineConfig, raw.get("engine", {}), "--set", "engine")
    serve(config, args.host, args.port, args.served_model_name, args.max_request_bytes, args.reserved_cpus)
    return 0
