"""The traffic panel: an arrival process and length distributions, start / pause / stop, inject
buttons, the presets, and the SLOs fixed before a run."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QListWidget, QPushButton, QTableWidget,
    QTableWidgetItem, QVBoxLayout, QWidget,
)

from workbench.presets import load_preset, preset_names
from workbench.scenario import SLO, Scenario, ScenarioEvent
from workbench.traffic import ARRIVAL_KINDS, LENGTH_KINDS, LengthDistribution, TrafficProfile
from workbench.gui.form_widgets import ChoiceBox, emit_validated, float_box, int_box


class TrafficPanel(QWidget):
    start_requested = Signal(object)  # Scenario
    pause_requested = Signal()
    resume_requested = Signal()
    stop_requested = Signal()
    inject_requested = Signal(int, int, int, str)  # count, prompt tokens, output tokens, tag
    preset_chosen = Signal(object)  # Scenario
    invalid = Signal(str)  # a configuration error, for the status line (never an exception in a slot)

    def __init__(self):
        super().__init__()
        self.arrival = ChoiceBox()
        self.arrival.addItems(list(ARRIVAL_KINDS))
        self.arrival.setToolTip("poisson: random; gamma: burstiness sets the clumping; closed_loop: keep N in flight.")
        self.rate = float_box(0.01, 10_000, 2.0, "Mean arrival rate, requests per second (a ramp's starting rate).")
        self.end_rate = float_box(0.01, 10_000, 10.0, "ramp: the rate reached at the end of the duration, requests per second.")
        self.duration = float_box(0, 1e6, 0, "ramp: how long the rate takes to move from rate to end rate (needed).\n"
                                  "Every arrival: stop sending after this many seconds (0 = the request count decides).", 1)
        self.burstiness = float_box(0.01, 100, 1.0, "Gamma shape: 1 is Poisson, below 1 burstier (CV = 1/sqrt(burstiness)).")
        self.concurrency = int_box(1, 4096, 8, "closed_loop: requests kept in flight.")
        self.num_requests = int_box(1, 1_000_000, 100, "Requests to send before the traffic ends.")
        self.prompts = ChoiceBox()
        self.prompts.addItems(["synthetic", "sharegpt"])
        self.prompts.setToolTip("synthetic: real text cut to the chosen lengths; sharegpt: real questions with their reply lengths.")
        self.prompt_kind = ChoiceBox()
        self.prompt_kind.addItems(list(LENGTH_KINDS))
        self.prompt_kind.setCurrentText("lognormal")
        self.prompt_mean = int_box(1, 1 << 20, 128, "Prompt tokens (mean).")
        self.prompt_spread = float_box(0, 10_000, 0.5, "normal: standard deviation in tokens; lognormal: sigma; uniform: the range is mean/2 .. 3*mean/2.")
        self.output_mean = int_box(1, 1 << 20, 64, "Output tokens per request (fixed; end-of-sequence is ignored so runs compare).")
        self.seed = int_box(0, 2**31 - 1, 0, "Same seed and settings, same schedule.")
        self.ttft_slo = float_box(0, 1e7, 1500, "TTFT threshold in ms (0 = none), fixed when the run starts.", 0)
        self.tpot_slo = float_box(0, 1e7, 250, "TPOT threshold in ms/token (0 = none).", 0)
        self.e2e_slo = float_box(0, 1e8, 0, "End-to-end threshold in ms (0 = none).", 0)

        self.start_button, self.pause_button, self.stop_button = QPushButton("Start"), QPushButton("Pause"), QPushButton("Stop")
        self.start_button.clicked.connect(lambda: emit_validated(self.scenario, self.start_requested, self.invalid, "traffic", self))
        self.start_button.clicked.connect(self._hide_preset)  # Start runs the fields, not the preset
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(lambda paused: (self.pause_requested if paused else self.resume_requested).emit())
        self.stop_button.clicked.connect(self.stop_requested.emit)

        self.burst_count = int_box(1, 10_000, 20, "How many short chats to inject at once.")
        self.burst_prompt = int_box(1, 1 << 20, 64, "Prompt tokens of each injected chat.")
        burst = QPushButton("Inject burst of chats")
        burst.clicked.connect(lambda: self.inject_requested.emit(self.burst_count.value(), self.burst_prompt.value(), 32, "chat"))
        self.long_tokens = int_box(1, 1 << 20, 6000, "Prompt tokens of the long request (clipped to the model's context).")
        long_prompt = QPushButton("Inject one long prompt")
        long_prompt.clicked.connect(lambda: self.inject_requested.emit(1, self.long_tokens.value(), 16, "long"))

        self.presets = QListWidget()
        for name in preset_names():
            variants = load_preset(name).variants
            self.presets.addItems([f"{name} / {variant}" for variant in variants] or [name])
        self.presets.setToolTip("Double-click to load and run a preset: its engine settings, traffic, events and SLOs.")
        self.presets.itemDoubleClicked.connect(lambda item: self.preset_chosen.emit(self.preset_scenario(item.text())))

        self.preset_label = QLabel("")
        self.preset_label.setWordWrap(True)
        self.preset_label.setVisible(False)
        # The preset's timeline, one event a row: what will actually be sent, and when.
        self.events = QTableWidget(0, 2)
        self.events.setHorizontalHeaderLabels(["at (s)", "event"])
        self.events.horizontalHeader().setStretchLastSection(True)
        self.events.verticalHeader().setVisible(False)
        self.events.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.events.setMaximumHeight(110)
        self.events.setVisible(False)
        self.shape = shape = QFormLayout()
        for label, widget in (
            ("arrival", self.arrival), ("rate (req/s)", self.rate), ("end rate (req/s)", self.end_rate),
            ("duration (s)", self.duration), ("burstiness", self.burstiness),
            ("concurrency", self.concurrency), ("requests", self.num_requests), ("prompts", self.prompts),
            ("prompt length", self.prompt_kind), ("prompt tokens", self.prompt_mean), ("spread", self.prompt_spread),
            ("output tokens", self.output_mean), ("seed", self.seed),
        ):
            shape.addRow(label, widget)
        traffic_box = QGroupBox("Traffic")
        traffic_layout = QVBoxLayout(traffic_box)
        traffic_layout.addWidget(self.preset_label)
        traffic_layout.addWidget(self.events)
        traffic_layout.addLayout(shape)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.pause_button, self.stop_button):
            buttons.addWidget(button)
        traffic_layout.addLayout(buttons)

        inject_box = QGroupBox("Inject")
        inject = QFormLayout(inject_box)
        inject.addRow("chats", self.burst_count)
        inject.addRow("chat prompt tokens", self.burst_prompt)
        inject.addRow(burst)
        inject.addRow("long prompt tokens", self.long_tokens)
        inject.addRow(long_prompt)

        slo_box = QGroupBox("SLOs (set before the run)")
        slo = QFormLayout(slo_box)
        slo.addRow("TTFT (ms)", self.ttft_slo)
        slo.addRow("TPOT (ms/token)", self.tpot_slo)
        slo.addRow("e2e (ms)", self.e2e_slo)

        presets_box = QGroupBox("Presets")
        QVBoxLayout(presets_box).addWidget(self.presets)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for box in (traffic_box, inject_box, slo_box, presets_box):
            layout.addWidget(box)
        self.arrival.currentTextChanged.connect(self._show_arrival_parameters)
        self._show_arrival_parameters(self.arrival.currentText())

    def _hide_preset(self) -> None:
        self.preset_label.setVisible(False)
        self.events.setVisible(False)

    def _show_arrival_parameters(self, arrival: str) -> None:
        """Only the fields the chosen arrival process reads."""
        for widget, used in ((self.rate, arrival != "closed_loop"), (self.end_rate, arrival == "ramp"),
                             (self.burstiness, arrival == "gamma"), (self.concurrency, arrival == "closed_loop")):
            self.shape.setRowVisible(widget, used)

    @staticmethod
    def preset_scenario(entry: str) -> Scenario:
        """"name" or "name / variant", as listed."""
        name, _, variant = entry.partition(" / ")
        return load_preset(name, variant=variant or None)

    def slo(self) -> SLO:
        def threshold(box: QDoubleSpinBox) -> float | None:
            return box.value() or None

        return SLO(ttft_ms=threshold(self.ttft_slo), tpot_ms=threshold(self.tpot_slo), e2e_ms=threshold(self.e2e_slo))

    def scenario(self) -> Scenario:
        kind, mean, spread = self.prompt_kind.currentText(), self.prompt_mean.value(), self.prompt_spread.value()
        prompt_len = LengthDistribution(
            kind=kind, mean=mean, std=spread if kind in ("normal", "lognormal") else 0.0,
            low=max(1, mean // 2) if kind == "uniform" else 1, high=mean * 3 // 2 if kind == "uniform" else 0,
        )
        traffic = TrafficProfile(
            arrival=self.arrival.currentText(), rate=self.rate.value(), end_rate=self.end_rate.value(),
            duration_s=self.duration.value(), burstiness=self.burstiness.value(),
            concurrency=self.concurrency.value(), num_requests=self.num_requests.value(), prompts=self.prompts.currentText(),
            prompt_len=prompt_len, output_len=LengthDistribution(kind="fixed", mean=self.output_mean.value()),
        )
        return Scenario(name="interactive", traffic=traffic, slo=self.slo(), seed=self.seed.value())

    def show_scenario(self, scenario: Scenario) -> None:
        """Reflect a preset's traffic and SLOs in the controls, and say what the preset runs: a
        preset with only a timeline of events leaves the fields as they were, for the next Start."""
        traffic = scenario.traffic
        timeline = " and the timeline below" if scenario.events else ""
        if traffic is None:
            what = f"no background traffic{', only the timeline below' if timeline else ''}. The fields below are for Start."
        else:
            what = f"the fields below show its traffic{timeline}"
        self.preset_label.setText(f"Preset {scenario.name!r}: {what}")
        self.preset_label.setVisible(True)
        self.events.setRowCount(len(scenario.events))
        for row, event in enumerate(scenario.events):
            self.events.setItem(row, 0, QTableWidgetItem(f"{event.at_s:g}"))
            self.events.setItem(row, 1, QTableWidgetItem(describe_event(event)))
        self.events.setVisible(bool(scenario.events))
        if traffic is not None:
            self.arrival.setCurrentText(traffic.arrival)
            self.rate.setValue(traffic.rate)
            self.end_rate.setValue(traffic.end_rate or self.end_rate.value())
            self.duration.setValue(traffic.duration_s)
            self.burstiness.setValue(traffic.burstiness)
            self.concurrency.setValue(traffic.concurrency)
            self.num_requests.setValue(max(1, traffic.num_requests))
            self.prompts.setCurrentText(traffic.prompts if traffic.prompts != "trace" else "synthetic")
            self.prompt_kind.setCurrentText(traffic.prompt_len.kind)
            self.prompt_mean.setValue(int(traffic.prompt_len.mean))
            self.output_mean.setValue(int(traffic.output_len.mean))
        self.seed.setValue(scenario.seed)
        self.ttft_slo.setValue(scenario.slo.ttft_ms or 0)
        self.tpot_slo.setValue(scenario.slo.tpot_ms or 0)
        self.e2e_slo.setValue(scenario.slo.e2e_ms or 0)


def describe_event(event: ScenarioEvent) -> str:
    if event.action == "inject":
        return f"inject {event.count} × {event.prompt_tokens}+{event.output_tokens}-token {event.tag!r}"
    if event.action == "set_rate":
        return f"rate {event.rate:g} req/s"
    return "stop the traffic"
