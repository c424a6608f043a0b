"""The window's state machine without a window (issue 49 #3): which run the panes show and what is
selected, through the transitions where the window audits found stale panes."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.cli import main
from workbench.live.request_rows import RequestRow
from workbench.live.window_session import WindowSession, live_request_history, opened_run_summary, step_not_kept
from workbench.runs.run_log import read_run_log


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A short run on a simulated GPU, with its step traces."""
    folder = tmp_path_factory.mktemp("run")
    assert (
        main(
            ["bench", "--preset", "chat-steady", "--set", "engine.model=simulated:llama-3-8b@a100-80gb"]
            + ["--set", "traffic.num_requests=12", "--set", "traffic.rate=20", "--out", str(folder), "--no-plots"]
        )
        == 0
    )
    return read_run_log(folder / "run.jsonl", with_traces=True)


def test_opening_a_run_shows_its_traces_and_explanation_and_back_to_live_forgets_them(recorded):
    session = WindowSession()
    session.select_request("chat-3")  # a live request, selected before the run is opened
    session.select_step(7)
    opened = session.read_opened_run("run", recorded, 90.0)
    assert not session.viewing_past_run  # reading switches nothing
    session.show_opened_run(opened)
    assert session.viewing_past_run and session.selected_step is None and session.explained is recorded
    assert opened.past.store is not None and opened.past.rows  # the Step panel and block map read these
    session.select_request("chat-5")  # a request of the opened run
    assert session.back_to_live() is True
    # Its explanation and its request go with it: "chat-5" would mark the live run's namesake.
    assert (session.opened, session.explained, session.selected_request, session.selected_step) == (
        None,
        None,
        None,
        None,
    )
    assert session.back_to_live() is False


def test_a_log_that_cannot_be_shown_changes_nothing(recorded):
    session = WindowSession()
    session.show_opened_run(session.read_opened_run("good", recorded, 90.0))
    session.select_request("chat-1")
    damaged = dataclasses.replace(
        recorded, header={key: value for key, value in recorded.header.items() if key != "start_time"}
    )
    with pytest.raises(KeyError):
        session.read_opened_run("damaged", damaged, 90.0)
    assert session.opened.name == "good" and session.selected_request == "chat-1" and session.explained is recorded


def test_a_new_run_forgets_the_last_runs_request_and_explanation(recorded):
    session = WindowSession()
    session.explain_live(recorded)
    session.select_request("chat-2")
    session.select_step(3)
    session.back_to_live()  # from the live run: its explanation stays on show
    assert session.explained is recorded and session.selected_request == "chat-2"
    session.new_run()
    assert (session.selected_request, session.selected_step, session.explained) == (None, None, None)


def test_a_new_engine_shows_its_live_run(recorded):
    session = WindowSession()
    session.show_opened_run(session.read_opened_run("run", recorded, 90.0))
    session.select_step(4)
    session.new_engine()
    assert not session.viewing_past_run and session.selected_step is None


def test_the_step_panes_read_the_live_traces_until_a_run_is_opened(recorded):
    session = WindowSession()
    live = object()  # the worker's store: handed through untouched
    assert session.trace_source(live, 12.5) == (live, 12.5)
    assert session.block_map_rows(["b", "a"]) == {"b": 0, "a": 1}  # the live table's order
    opened = session.read_opened_run("run", recorded, 90.0)
    session.show_opened_run(opened)
    assert session.trace_source(live, 12.5) == (opened.past.store, recorded.header["start_time"])
    assert session.block_map_rows(["b", "a"]) is opened.past.rows
    first, last = opened.past.store.step_range()
    assert step_not_kept(last + 1, opened.past.store) == (
        f"step {last + 1} is not kept (steps {first}..{last} are; the run log has all)"
    )
    assert step_not_kept(3, None) == "step 3 is not kept"


def test_a_live_requests_history_covers_the_steps_from_its_arrival_to_its_end(recorded):
    opened = WindowSession().read_opened_run("run", recorded, 90.0)
    store, origin = opened.past.store, recorded.header["start_time"]
    request = recorded.requests[0]
    arrival_s, end_s = request["arrival_time"] - origin, request["finish_time"] - origin
    timeline = [(arrival_s, "arrived"), (end_s, "finished")]
    ended = RequestRow(request["request_id"], "chat", "finished", [1, 2, 3], timeline=timeline)
    history = live_request_history(store, origin, ended)
    assert request["request_id"] in history and "step" in history
    assert live_request_history(store, origin, dataclasses.replace(ended, timeline=[])) == ""
    assert live_request_history(None, origin, ended) == ""


def test_an_opened_runs_summary_says_whether_it_is_complete(recorded):
    opened = WindowSession().read_opened_run("run", recorded, 90.0)
    assert opened_run_summary("/runs/a", opened, [], 12, 12) == "viewing /runs/a (complete); 'Back to live' returns"
    assert opened_run_summary("/runs/a", opened, ["saved mid-run"], 5, 12).startswith(
        "viewing /runs/a (incomplete: saved mid-run; 5 finished of 12 arrived)"
    )
