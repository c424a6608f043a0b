"""The engine's one error type.

Everything a user can get wrong (a missing model file, a corrupt GGUF, an impossible configuration)
surfaces as an `EngineError` whose message names the file, key or value and what was expected, so
the GUI and the CLI can show one line instead of a stack trace.
"""


class EngineError(Exception):
    """A problem with the engine's input or configuration, explained in the message."""


class ModelLoadError(EngineError):
    """A model file or directory could not be read; the message names the path."""


class ConfigError(EngineError):
    """A configuration value is out of range or inconsistent; the message names the key."""
