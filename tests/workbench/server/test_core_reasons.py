"""Typed reasons across the engine core's boundary (issue 60 #2): the core says why a request
ended or was not taken, and only the HTTP layer turns that into a status."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from workbench.server import core_protocol as protocol
from workbench.server.core_protocol import EndReason
from workbench.server.openai_api import HTTP_STATUS


@pytest.mark.parametrize("reason", list(EndReason))
def test_each_reason_crosses_the_boundary_typed_and_has_one_http_status(reason):
    event = protocol.RequestsEnded(["r1", "r2"], "why", reason)
    back = protocol.decode_event(protocol.encode(event))
    assert back == event and back.reason is reason
    assert HTTP_STATUS[reason] in (400, 500, 503)


def test_the_http_statuses_are_the_ones_serve_answered_before_the_reasons_were_typed():
    assert HTTP_STATUS == {
        EndReason.REFUSED: 400,  # what the request asked can never run
        EndReason.SHUTTING_DOWN: 503,
        EndReason.UNAVAILABLE: 503,  # the engine stopped serving
        EndReason.FAILED: 500,  # the request's step raised, or the core died under it
    }


def test_the_core_protocol_and_the_core_carry_no_http_status():
    """The core's messages say what happened; a field named status, or a number from 400 to 599,
    in their code would be the HTTP layer's business leaking in (RequestAdded.status = 400 once
    did). Docstrings may speak of HTTP."""
    server = Path(protocol.__file__).parent
    for name in ("core_protocol.py", "engine_core.py"):
        tree = ast.parse((server / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and type(node.value) is int:
                assert not 400 <= node.value <= 599, f"{name}:{node.lineno}: {node.value}"
            named = getattr(node, "attr", None) or getattr(node, "id", None) or getattr(node, "arg", None)
            assert named != "status", f"{name}:{node.lineno}: {named}"
