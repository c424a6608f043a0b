"""What to send: scenarios and presets, traffic profiles and the requests they plan, prompts,
multi-turn sessions, request traces (a recorded workload's rows) and the one rule that fits a
request into the model's context."""
