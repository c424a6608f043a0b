"""Per-module mutation scores from the last `make mutation` run (mutmut's mutants/*.meta files).

    python scripts/mutation_scores.py [--survivors MODULE]

killed: a test failed; timeout: the tests ran past mutmut's limit (a mutant that loops forever,
counted as detected, as mutmut does); survived: every selected test passed. Score = detected /
(detected + survived).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

KILLED, SURVIVED = 1, 0
TIMEOUTS = {36, 24, -24, 152}


def outcome(code: int | None) -> str:
    if code is None:
        return "not run"
    if code == KILLED:
        return "killed"
    if code == SURVIVED:
        return "survived"
    if code in TIMEOUTS:
        return "timeout"
    if code == 33:
        return "no tests"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--survivors", metavar="MODULE", help="list this module's surviving mutants, e.g. workbench/traffic/profile.py"
    )
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    args = parser.parse_args()
    print(f"{'module':<28} {'mutants':>7} {'killed':>7} {'timeout':>7} {'survived':>8} {'score':>7}")
    for meta in sorted(args.mutants.rglob("*.py.meta")):
        module = str(meta.relative_to(args.mutants)).removesuffix(".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        counts = Counter(outcome(code) for code in codes.values())
        detected = counts["killed"] + counts["timeout"]
        score = 100.0 * detected / (detected + counts["survived"]) if detected + counts["survived"] else float("nan")
        print(
            f"{module:<28} {len(codes):>7} {counts['killed']:>7} {counts['timeout']:>7} {counts['survived']:>8} "
            f"{score:>6.1f}%"
        )
        if args.survivors == module:
            for key, code in sorted(codes.items()):
                if code == SURVIVED:
                    print(f"    {key}")


if __name__ == "__main__":
    main()
