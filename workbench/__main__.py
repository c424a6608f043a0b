"""`workbench` console script. Until the desktop window lands it runs the engine's terminal demo."""

from __future__ import annotations

import sys

from engine.errors import EngineError


def main() -> None:
    from engine.demo import main as demo

    try:
        demo()
    except EngineError as error:
        print(f"workbench: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
