"""What several commands share: argument types that refuse bad numbers with the value named, and
the options of a command that drives a server."""

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
