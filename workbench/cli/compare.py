"""`workbench compare`: two runs side by side and the decision's verdict."""

from __future__ import annotations

import json
from pathlib import Path


def add_to(commands) -> None:
    compare = commands.add_parser("compare", help="compare two runs and check a decision")
    compare.add_argument("baseline", help="run folder (or report.json) of the baseline")
    compare.add_argument("candidate", help="run folder (or report.json) of the candidate")
    compare.add_argument("--intended", action="append", help="intended gain, e.g. output_tok_s:+20%%")
    compare.add_argument("--tolerated", action="append", help="tolerated regression, e.g. ttft_p99_ms:+10%%")
    compare.add_argument("--json", type=Path, help="also write the comparison as JSON")
    compare.set_defaults(handler=run)


def run(args) -> int:
    from workbench.analysis.compare import compare_folders, format_comparison

    result = compare_folders(args.baseline, args.candidate, args.intended, args.tolerated)
    print(format_comparison(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
