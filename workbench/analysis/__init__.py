"""The questions asked of recorded runs: the report and its intervals, comparisons and their
verdicts, arms, explain, sweeps, replays, KV capacity and the cost model's calibration."""
