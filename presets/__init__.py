"""The presets (one TOML file per scenario), the catalogue of model shapes and hardware
(catalogue/*.toml) and the recorded traces presets replay (traces/), shipped as package data:
workbench/traffic/presets.py and engine/simulation/catalogue.py find them with importlib.resources, in a
checkout and in an installed wheel alike (reading them relative to the source tree found nothing
once installed)."""
