"""`workbench gui` (and `workbench` alone): the desktop app, on a preset, a variant or both arms, a
server, a baseline; unattended with --run-for and --screenshot."""

from __future__ import annotations

from workbench.cli.arguments import add_server_model_options, at_least


def add_to(commands) -> None:
    gui = commands.add_parser("gui", help="the desktop app (the default command)")
    gui.add_argument(
        "--preset",
        help="load and run this preset ('name' or 'name / variant', as the window lists "
        "them); a preset with variants and none chosen runs both arms side by side in the Arms tab",
    )
    gui.add_argument("--variant", help="with --preset: run this variant of it")
    gui.add_argument(
        "--run-for",
        type=at_least(float, 0.0, inclusive=False),
        metavar="SECONDS",
        help="run the traffic this long after loading, then exit (both arms of a preset: until they have run)",
    )
    gui.add_argument(
        "--screenshot", metavar="FILE.png", help="with --run-for: save a screenshot of the window before exiting"
    )
    gui.add_argument(
        "--server", metavar="URL", help="drive this OpenAI-compatible server instead of the in-process engine"
    )
    gui.add_argument(
        "--baseline", metavar="RUN_DIR", help="draw this past run (a bench --out folder) faded under the live plots"
    )
    gui.add_argument(
        "--inspect",
        type=at_least(float, 0.0),
        metavar="SECONDS",
        help="with --run-for: when the time is up, show the step at this time into the run in the Step panel",
    )
    add_server_model_options(gui)
    gui.set_defaults(handler=run)


def run(args) -> int:
    from workbench.gui.app import run_gui

    return run_gui(
        args.preset,
        args.run_for,
        args.screenshot,
        args.server,
        args.served_model,
        args.tokenizer,
        args.baseline,
        args.inspect,
        args.request_timeout,
        args.variant,
    )


def run_without_arguments(_args) -> int:
    """`workbench` alone: the window on the bundled model, or the configuration it last applied."""
    from workbench.gui.app import run_gui

    return run_gui()
