"""What a well-formed run-log line holds, checked as a log is read: a line with a missing key or a
value of the wrong type is skipped and counted with its line number (workbench/runs/run_log.py)
instead of failing a report, `trace`, `compare` or the window later with a traceback.

Steps and requests are checked against the dataclasses they are read back into (`StepStats`,
`RequestMetrics`, with their type hints); headers, footers and traces against the keys their
readers use.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache

from engine.requests.metrics import RequestMetrics, StepStats
from workbench.step_traces.log import read_trace
from workbench.traffic.scenario import SLO

_NUMBER = (int, float)
_HEADER = {"start_time": _NUMBER, "scenario": dict, "engine": dict, "versions": dict}
_FOOTER = {"duration_s": _NUMBER}
_TRACE = {
    "step": int,
    "time_s": _NUMBER,
    "full": bool,
    "waiting": int,
    "waiting_long": int,
    "running": int,
    "token_budget": int,
    "kv_before": list,
    "released_before": list,
    "rows": list,
    "held": list,
    "execute_s": _NUMBER,
    "other_s": _NUMBER,
    "block_changes": list,
    "registered": list,
    "preemptions": list,
    "kv_after": list,
    "emitted": list,
    "decode_rows_omitted": int,
    "tokens_omitted": int,
}
_REQUEST_KEYS = {"request_id": str, "tag": str}
# A request's plan (PlannedRequest.record; logs before it have none), and its optional session.
_PLANNED = {"prompt_tokens": int, "max_tokens": int, "source": str, "clipped": bool}


def record_problem(kind: str, record: dict) -> str | None:
    """Why this line (its "type" removed) cannot be used, or None when it can."""
    if kind == "header":
        problem = _keys_problem(record, _HEADER)
        if problem is None:
            slo = record["scenario"].get("slo")
            if not isinstance(slo, dict):
                return "scenario.slo: expected an object"
            unknown = set(slo) - {field.name for field in dataclasses.fields(SLO)}
            problem = f"scenario.slo: unknown keys {sorted(unknown)}" if unknown else _fields_problem(slo, SLO)
        return problem
    if kind == "footer":
        return _keys_problem(record, _FOOTER)
    if kind == "step":
        problem = _fields_problem(record, StepStats)
        if problem is None and record["kv_blocks_total"] < 1:
            problem = f"kv_blocks_total: expected at least 1, got {record['kv_blocks_total']}"
        return problem
    if kind == "request":
        problem = _keys_problem(record, _REQUEST_KEYS) or _fields_problem(record, RequestMetrics)
        if problem is None and "planned" in record:
            problem = _planned_problem(record["planned"])
        return problem
    if kind == "trace":
        problem = _keys_problem(record, _TRACE)
        if problem is None:
            try:
                read_trace(record)
            except (TypeError, ValueError) as error:  # an entry with too few or too many columns
                problem = f"a trace entry of the wrong shape ({error})"
        return problem
    return f"unknown line type {kind!r}"


def _planned_problem(planned) -> str | None:
    if not isinstance(planned, dict):
        return "planned: expected an object"
    problem = _keys_problem(planned, _PLANNED)
    if problem is None and not _matches(planned.get("session"), int | None):
        return f"planned.session: expected an integer or null, got {planned['session']!r:.60}"
    return problem and f"planned: {problem}"


def _keys_problem(record: dict, expected: dict) -> str | None:
    for key, types_ in expected.items():
        if key not in record:
            return f"no {key!r}"
        if not _instance(record[key], types_):
            return f"{key}: expected {_names(types_)}, got {record[key]!r:.60}"
    return None


def _fields_problem(record: dict, dataclass) -> str | None:
    """Each field of the dataclass present (unless it has a default: older logs lack newer
    fields) and of its hinted type."""
    hints = _hints(dataclass)
    for field in dataclasses.fields(dataclass):
        if field.name not in record:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                return f"no {field.name!r}"
            continue
        if not _matches(record[field.name], hints[field.name]):
            return f"{field.name}: expected {hints[field.name]}, got {record[field.name]!r:.60}"
    return None


@cache
def _hints(dataclass) -> dict:
    return typing.get_type_hints(dataclass)


def _matches(value, hint) -> bool:
    """JSON's view of a type hint: int is no bool, float takes ints, list[X] checks each item."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(element, item) for element in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return _instance(value, _NUMBER)
    return _instance(value, hint)


def _instance(value, types_) -> bool:
    """isinstance, except that a bool (JSON's true/false) is not a number."""
    if isinstance(value, bool):
        return types_ is bool or (isinstance(types_, tuple) and bool in types_)
    return isinstance(value, types_)


def _names(types_) -> str:
    return (
        "a number"
        if types_ == _NUMBER
        else {int: "an integer", bool: "true or false", list: "a list", dict: "an object", str: "a string"}[types_]
    )
