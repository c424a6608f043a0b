"""Pure tensor functions: torch references, and Triton versions where they pay, dispatched by device.

Nothing here knows about engine types; every function takes and returns tensors.
"""
