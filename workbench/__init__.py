"""The lab around the engine: traffic, runs, reports and the questions asked of them; the
desktop app's Qt code lives in `gui/` alone, the command line in `cli/`, the server in `server/`."""
