"""Replaying a recorded request trace: which rows a run takes, when each arrives, and how its
lengths fit the model.

A trace is a CSV file with a header row, or JSONL, one request per row: its arrival time, its
prompt (text, or a length in tokens), its output length and, optionally, its tag (else the
traffic's). Two spellings of the columns are read:
the workbench's own (`arrival_s`, `prompt` or `prompt_tokens`, `output_tokens`) and Microsoft
Vidur's, in which the Azure LLM inference trace is published (`arrived_at`, `num_prefill_tokens`,
`num_decode_tokens`).

The rows a run replays, in this order:
  1. the window: rows arriving at or after `trace_start_s` (trace seconds), rebased to start at 0;
     a first row more than a day after it is refused (absolute timestamps: the message says
     which `trace_start_s` replays from it), and so is a later row more than a day (in run
     seconds) after the one before it;
  2. time scaling: arrival times multiplied by `time_scale` (Vidur's time_scale_factor: 0.5
     replays the trace twice as fast, 10 ten times as slow);
  3. `duration_s`: rows arriving within that many run seconds (0 = all);
  4. `num_requests`: the first N of those (0 = all).
Lengths are then fitted to the model: a prompt longer than the context leaves room for one output
token, an output is cut to what the context leaves; each request so cut is counted, and the
count goes into the run's header and report (`requests_clipped`).

Only the numbers of each row are kept (a few dozen bytes); its prompt's tokens are made when the
request falls due, so an hour of production traffic costs nothing until it is sent.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ConfigError

# The column each quantity is read from, in the order tried: the workbench's name, then Vidur's.
COLUMNS = {
    "arrival_s": ("arrival_s", "arrived_at"),
    "prompt_tokens": ("prompt_tokens", "num_prefill_tokens"),
    "output_tokens": ("output_tokens", "num_decode_tokens"),
}
_EXPECTED = (
    "arrival_s (or arrived_at), prompt or prompt_tokens (or num_prefill_tokens), output_tokens (or num_decode_tokens)"
)


@dataclass(frozen=True)
class TraceRow:
    line: int  # where it was read, for messages
    arrival_s: float
    output_tokens: int
    prompt_tokens: int = 0  # a length, when the row has no text
    prompt_text: str | None = None
    tag: str | None = None  # the row's own tag, if it has one


@dataclass(frozen=True)
class TraceWindow:
    """Which rows of a trace a run replays, and how fast (see the module's docstring)."""

    start_s: float = 0.0
    time_scale: float = 1.0
    duration_s: float = 0.0
    num_requests: int = 0


def _column(row: dict, quantity: str, where: str):
    for name in COLUMNS[quantity]:
        value = row.get(name)
        if value not in (None, ""):
            return name, value
    raise ConfigError(f"{where}: missing column {COLUMNS[quantity][0]!r} (expected {_EXPECTED})")


def _number(row: dict, quantity: str, where: str, whole: bool = False) -> tuple[str, float | int]:
    """(the column read, its value): a finite number, or a whole one for a count of tokens."""
    name, value = _column(row, quantity, where)
    try:
        number = None if isinstance(value, bool) else float(value)  # JSON's true is no count
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number) or (whole and not number.is_integer()):
        raise ConfigError(f"{where}: column {name!r}: expected {'a whole' if whole else 'a'} number, got {value!r}")
    return name, int(number) if whole else number


def parse_row(row: dict, where: str) -> TraceRow:
    """One request of a trace; `where` (file:line) names it in every message."""
    line = int(where.rsplit(":", 1)[1])
    if None in row:  # csv.DictReader's key for fields past the header's
        raise ConfigError(f"{where}: {len(row[None])} more field(s) than the header names")
    arrival_name, arrival = _number(row, "arrival_s", where)
    output_name, output = _number(row, "output_tokens", where, whole=True)
    if arrival < 0:
        raise ConfigError(f"{where}: column {arrival_name!r}: expected seconds >= 0, got {arrival:g}")
    if output < 1:
        raise ConfigError(f"{where}: column {output_name!r}: expected at least 1 output token, got {output}")
    tag = str(row["tag"]) if row.get("tag") not in (None, "") else None
    text = row.get("prompt")
    if text not in (None, ""):
        return TraceRow(line, arrival, output, prompt_text=str(text), tag=tag)
    prompt_name, prompt = _number(row, "prompt_tokens", where, whole=True)
    if prompt < 1:
        raise ConfigError(f"{where}: column {prompt_name!r}: expected at least 1 prompt token, got {prompt}")
    return TraceRow(line, arrival, output, prompt_tokens=prompt, tag=tag)


def _utf8_text(path: Path) -> str:
    """The file as UTF-8 text (a leading byte-order mark, as spreadsheets write it, is dropped);
    UTF-16 or Latin-1 is refused naming the first line that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 (line {line})") from None


def read_trace_rows(path: Path) -> list[TraceRow]:
    """Every row of the trace at `path`, in arrival order; a bad row is refused with its line and column."""
    if not path.exists():
        raise ConfigError(f"{path}: trace file not found")
    text = _utf8_text(path)
    if path.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ConfigError(f"{path}:{number}: expected a JSON object with {_EXPECTED}")
            rows.append(parse_row(record, f"{path}:{number}"))
    elif path.suffix == ".csv":
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = [parse_row(row, f"{path}:{number}") for number, row in enumerate(reader, start=2)]
    else:
        raise ConfigError(f"{path}: expected a .csv or .jsonl trace")
    if not rows:
        raise ConfigError(f"{path}: the trace has no requests")
    return sorted(rows, key=lambda row: row.arrival_s)


# A run that would wait longer than this for its first request (a day) is refused: its arrival
# times are absolute (a production log's epoch seconds), and it would sit at "requests: 0" for ever.
# So is a later request this far after the one before it (a row 1e300 s on would never come).
MAX_QUIET_S = 86_400.0


def select_rows(rows: list[TraceRow], window: TraceWindow, where: str) -> list[TraceRow]:
    """The rows a run replays, with their arrival times in run seconds (module docstring)."""
    chosen = []
    for row in rows:
        if row.arrival_s < window.start_s:
            continue
        arrival = (row.arrival_s - window.start_s) * window.time_scale
        if window.duration_s and arrival > window.duration_s:
            break
        if not chosen and (quiet := row.arrival_s - window.start_s) > MAX_QUIET_S:
            raise ConfigError(
                f"{where}: the first request arrives {row.arrival_s:.17g} s into the trace, {quiet:,.0f} s "
                f"after trace_start_s = {window.start_s:g}: arrival times look absolute (epoch seconds?); set "
                f"traffic.trace_start_s = {row.arrival_s:.17g} to replay from that request"
            )
        if chosen and (gap := arrival - chosen[-1].arrival_s) > MAX_QUIET_S:
            raise ConfigError(
                f"{where}: line {row.line} arrives {gap:,.6g} run seconds after line {chosen[-1].line}, more than "
                f"a day of quiet that a run would wait through (a simulated run then reads 0 tok/s, a server "
                f"waits for ever); set traffic.duration_s = {chosen[-1].arrival_s:.17g} to end the replay before it"
            )
        chosen.append(dataclasses.replace(row, arrival_s=arrival))
        if window.num_requests and len(chosen) == window.num_requests:
            break
    if not chosen:
        last = rows[-1].arrival_s
        raise ConfigError(
            f"{where}: no request in the window (trace_start_s = {window.start_s:g}, duration_s = "
            f"{window.duration_s:g} after time_scale = {window.time_scale:g}); the trace's arrivals run from "
            f"{rows[0].arrival_s:g} to {last:g} s"
        )
    return chosen
