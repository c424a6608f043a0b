"""`workbench serve`: the engine behind an OpenAI-compatible HTTP API with vLLM's metrics."""

from __future__ import annotations

from workbench.cli.arguments import add_engine_options, at_least, engine_config, port_number
from workbench.server import CORE_STOP_WAIT_S, DEFAULT_MAX_REQUEST_BYTES


def add_to(commands) -> None:
    serve = commands.add_parser("serve", help="serve the engine over an OpenAI-compatible HTTP API with vLLM's metrics")
    add_engine_options(serve)
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
    serve.add_argument(
        "--core-stop-timeout",
        type=at_least(float, 0.0),
        default=CORE_STOP_WAIT_S,
        metavar="SECONDS",
        help="at shutdown, how long the engine core has to stop (its compile too) before it is killed "
        f"(default {CORE_STOP_WAIT_S:g})",
    )
    serve.set_defaults(handler=run)


def run(args) -> int:
    from workbench.server.run import serve

    config = engine_config(args)
    serve(
        config,
        args.host,
        args.port,
        args.served_model_name,
        args.max_request_bytes,
        args.reserved_cpus,
        args.core_stop_timeout,
    )
    return 0
