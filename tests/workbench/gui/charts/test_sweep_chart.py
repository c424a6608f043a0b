"""The sweep's chart invents no difference: equal points do not fill the axis, and a line between
points whose intervals overlap is dashed and the title says so."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg

from workbench.analysis.sweep import RATE_KEY, Sweep
from workbench.gui.charts.sweep_chart import MIN_SPAN, OVERLAP_NOTE, goodput_rate_plot, throughput_latency_plot


def point(seqs: str, tok_s: float, p99: float, spread: float, goodput: float = 100.0) -> dict:
    return {
        "engine.max_num_seqs": seqs,
        RATE_KEY: "4",
        "output_tok_s": tok_s,
        "output_tok_s_low": tok_s - spread,
        "output_tok_s_high": tok_s + spread,
        "tpot_p99_ms": p99,
        "tpot_p99_ms_low": p99 * 0.9,
        "tpot_p99_ms_high": None,  # a p99 of fewer than 368 requests: no upper bound
        "goodput_perc": goodput,
        "goodput_perc_low": goodput - 5,
        "goodput_perc_high": min(100.0, goodput + 5),
    }


def lines(plot: pg.PlotItem) -> list[pg.QtCore.Qt.PenStyle]:
    return [item.opts["pen"].style() for item in plot.listDataItems() if item.opts["pen"] is not None]


def test_two_equal_points_stay_equal_on_the_chart(qtbot):
    """0.0008 tok/s apart, inside each other's spread: the axis spans at least a fifth of the
    value and the line joining them is dashed."""
    sweep = Sweep(Path("."), ["engine.max_num_seqs"], [point("8", 100.0, 20.0, 3.0), point("16", 100.0008, 20.0, 3.0)])
    plot = throughput_latency_plot(sweep)
    (x_low, x_high), _ = plot.getViewBox().viewRange()
    assert x_high - x_low >= MIN_SPAN * 100.0
    assert lines(plot) == [pg.QtCore.Qt.PenStyle.DashLine]
    assert plot.titleLabel.text.endswith(OVERLAP_NOTE)


def test_points_apart_on_an_axis_are_joined_by_a_solid_line(qtbot):
    sweep = Sweep(Path("."), ["engine.max_num_seqs"], [point("8", 100.0, 20.0, 3.0), point("16", 300.0, 20.0, 3.0)])
    plot = throughput_latency_plot(sweep)
    assert lines(plot) == [pg.QtCore.Qt.PenStyle.SolidLine] and OVERLAP_NOTE not in plot.titleLabel.text
    rates = Sweep(
        Path("."),
        [RATE_KEY],
        [{**point("8", 100.0, 20.0, 3.0), RATE_KEY: rate} for rate in ("2", "4")],
    )
    # Two rates (a setting, not an estimate) with the same goodput and interval: dashed.
    assert lines(goodput_rate_plot(rates)) == [pg.QtCore.Qt.PenStyle.DashLine]


def test_a_sweep_charts_title_gets_a_row_as_tall_as_its_lines(qtbot):
    """Issue 77 #6: pyqtgraph keeps 30 px for any title, and a chart's three or four lines (72-88 px)
    lost their first line at 1280 px and drew over the data at 800."""
    from workbench.gui.charts.plots import TITLE_LINE_PX

    sweep = Sweep(Path("."), ["engine.max_num_seqs"], [point("8", 100.0, 20.0, 3.0), point("16", 100.0008, 20.0, 3.0)])
    for plot, lines_at_least in ((throughput_latency_plot(sweep), 3), (goodput_rate_plot(sweep), 1)):
        rows = plot.titleLabel.text.count("<br>") + 1
        assert rows >= lines_at_least and plot.titleLabel.maximumHeight() == rows * TITLE_LINE_PX
        assert plot.layout.rowMinimumHeight(0) == rows * TITLE_LINE_PX
