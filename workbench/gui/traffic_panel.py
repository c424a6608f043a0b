"""The traffic panel: an arrival process and length distributions, start / pause / stop, inject
buttons, the presets, and the SLOs fixed before a run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import EngineConfig
from engine.errors import ConfigError
from workbench.gui.form_widgets import choice_box, emit_validated, float_box, int_box, refused_typing
from workbench.traffic.arrivals import ARRIVALS
from workbench.traffic.presets import load_preset, preset_names
from workbench.traffic.profile import LENGTH_KINDS, LengthDistribution, TrafficProfile
from workbench.traffic.scenario import SLO, Scenario, ScenarioEvent
from workbench.traffic.sources import PROMPT_SOURCES


class LengthFields:
    """One length distribution as form rows: its kind, the parameters that kind reads (fixed: the
    value; normal and lognormal: mean and spread; uniform: none) and the clipping range every kind
    has (sharegpt prompts clip their reference reply lengths to it)."""

    def __init__(self, what: str, kind: str, mean: int, spread: float):
        self.what = what
        self.kind = choice_box(list(LENGTH_KINDS), f"How {what} lengths are drawn.")
        self.kind.setCurrentText(kind)
        self.mean = int_box(1, 1 << 20, mean, f"{what.capitalize()} tokens: the fixed value, or the mean.")
        self.spread = float_box(
            0, 10_000, spread, "normal: standard deviation in tokens; lognormal: sigma of the underlying normal."
        )
        self.low = int_box(
            1, 1 << 20, 1, f"The shortest {what} (every kind is clipped to it; uniform: the range's start)."
        )
        self.high = int_box(
            0, 1 << 20, 0, f"The longest {what} (0 = the model's limit; uniform: the range's end, needed)."
        )
        self.high.setSpecialValueText("model limit")

    def add_rows(self, form: QFormLayout) -> None:
        self._form, self._shown = form, True
        for label, widget in (
            (f"{self.what} length", self.kind),
            (f"{self.what} tokens", self.mean),
            (f"{self.what} spread", self.spread),
            (f"{self.what} at least", self.low),
            (f"{self.what} at most", self.high),
        ):
            form.addRow(label, widget)
        self.kind.currentTextChanged.connect(lambda _kind: self._show_parameters())
        self._show_parameters()

    def set_shown(self, shown: bool) -> None:
        """All its rows, or none (a trace's lengths are recorded, not drawn)."""
        self._shown = shown
        self._show_parameters()

    def _show_parameters(self) -> None:
        kind, form = self.kind.currentText(), self._form
        for widget in (self.kind, self.low, self.high):
            form.setRowVisible(widget, self._shown)
        form.setRowVisible(self.mean, self._shown and kind != "uniform")
        form.setRowVisible(self.spread, self._shown and kind in ("normal", "lognormal"))

    def distribution(self) -> LengthDistribution:
        # Uniform reads no mean, fixed and uniform no spread: hidden, they keep their values, so a
        # preset round-trips. Every kind is clipped to [at least, at most].
        return LengthDistribution(
            kind=self.kind.currentText(),
            mean=self.mean.value(),
            std=self.spread.value(),
            low=self.low.value(),
            high=self.high.value(),
        )

    def show(self, distribution: LengthDistribution) -> None:
        self.kind.setCurrentText(distribution.kind)
        self.mean.setValue(round(distribution.mean))
        self.spread.setValue(distribution.std)
        self.low.setValue(distribution.low)
        self.high.setValue(distribution.high)


class TrafficPanel(QWidget):
    start_requested = Signal(object)  # Scenario
    pause_requested = Signal()
    resume_requested = Signal()
    stop_requested = Signal()
    inject_requested = Signal(int, int, int, str, object)  # count, prompt tokens, output tokens, tag, SLO fields
    preset_chosen = Signal(object, str)  # Scenario, and its entry in the list ("name / variant")
    invalid = Signal(str)  # a configuration error, for the status line (never an exception in a slot)

    def __init__(self):
        super().__init__()
        # The engine loaded (the main window sets it): a preset's [engine] settings apply on top of it.
        self.applied_engine: EngineConfig | None = None
        self.arrival = choice_box(
            list(ARRIVALS), "poisson: random; gamma: burstiness sets the clumping; closed_loop: keep N in flight."
        )
        self.rate = float_box(0.01, 10_000, 2.0, "Mean arrival rate, requests per second (a ramp's starting rate).")
        self.end_rate = float_box(
            0.01, 10_000, 10.0, "ramp: the rate reached at the end of the duration, requests per second."
        )
        self.duration = float_box(
            0,
            1e6,
            0,
            "ramp: how long the rate takes to move from rate to end rate (needed).\n"
            "Every arrival: stop sending after this many seconds (0 = the request count decides).",
            1,
        )
        self.burstiness = float_box(
            0.01, 100, 1.0, "Gamma shape: 1 is Poisson, below 1 burstier (CV = 1/sqrt(burstiness))."
        )
        self.concurrency = int_box(1, 4096, 8, "closed_loop: requests kept in flight.")
        self.num_requests = int_box(
            0, 1_000_000, 100, "Requests to send before the traffic ends (0: no limit, the duration decides)."
        )
        # A trace preset replays recorded arrival times and lengths: the arrival and length fields
        # give way to what the replay reads (they showed Poisson at 2 req/s while the trace ran).
        self.trace_file = QLabel("")
        self.trace_file.setWordWrap(True)
        self.time_scale = float_box(
            0.001, 1000, 1.0, "trace: arrival times are multiplied by this (0.5 = twice the pace, 20 = 20x slower).", 3
        )
        self.trace_start = float_box(0, 1e7, 0, "trace: replay from this arrival time on (trace seconds).", 1)
        self.prompts = choice_box(
            [name for name, source in PROMPT_SOURCES.items() if source.offered_in_window],
            "synthetic: real text cut to the chosen lengths; sharegpt: real questions with their reply lengths; "
            "sessions: multi-turn conversations that come back after a think time.",
        )
        self.shared_prefix = int_box(
            0,
            1 << 20,
            0,
            "Tokens of a common system prompt before every synthetic prompt "
            "(what prefix caching can serve from the cache).",
        )
        self.think_time = float_box(0, 1e6, 5.0, "sessions: mean seconds from a turn's last token to the next turn.", 1)
        self.turns = int_box(1, 1000, 4, "sessions: at most this many turns each.")
        # Every single-valued setting an arrival process or a prompt source reads, by its
        # TrafficProfile field (their registries name them): a setting no box here was made for
        # gets a plain one from the field's type and default.
        self.setting_boxes: dict[str, QWidget] = {
            "rate": self.rate,
            "end_rate": self.end_rate,
            "burstiness": self.burstiness,
            "concurrency": self.concurrency,
            "shared_prefix_tokens": self.shared_prefix,
            "time_scale": self.time_scale,
            "trace_start_s": self.trace_start,
            "think_time_s": self.think_time,
            "turns": self.turns,
        }
        registered = [*(p.settings for p in ARRIVALS.values()), *(s.settings for s in PROMPT_SOURCES.values())]
        for name in dict.fromkeys(setting for settings in registered for setting in settings):
            self.setting_boxes.setdefault(name, _plain_box(name))
        self.prompt_len = LengthFields("prompt", "lognormal", 128, 0.5)
        self.output_len = LengthFields("output", "fixed", 64, 0.0)
        self.output_len.mean.setToolTip(
            "Output tokens per request (end-of-sequence is ignored unless the preset says otherwise, so runs compare)."
        )
        # The preset the fields came from: Start keeps what they do not show (temperature, tag,
        # end-of-sequence, a trace file) and names the run after it.
        self._preset: tuple[str, TrafficProfile | None] | None = None
        self.seed = int_box(0, 2**31 - 1, 0, "Same seed and settings, same schedule.")
        self.ttft_slo = float_box(0, 1e7, 1500, "TTFT threshold in ms (0 = none), fixed when the run starts.", 0)
        self.tpot_slo = float_box(0, 1e7, 250, "TPOT threshold in ms/token (0 = none).", 0)
        self.e2e_slo = float_box(0, 1e8, 0, "End-to-end threshold in ms (0 = none).", 0)

        self.start_button, self.pause_button, self.stop_button = (
            QPushButton("Start"),
            QPushButton("Pause"),
            QPushButton("Stop"),
        )
        self.start_button.clicked.connect(
            lambda: emit_validated(
                self.scenario, self.start_requested, self.invalid, "traffic", (self.traffic_box, self.slo_box)
            )
        )
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(
            lambda paused: (self.pause_requested if paused else self.resume_requested).emit()
        )
        self.stop_button.clicked.connect(self.stop_requested.emit)

        self.burst_count = int_box(1, 10_000, 20, "How many short chats to inject at once.")
        self.burst_prompt = int_box(1, 1 << 20, 64, "Prompt tokens of each injected chat.")
        burst = QPushButton("Inject burst of chats")
        burst.clicked.connect(lambda: self._inject(self.burst_count, self.burst_prompt, 32, "chat"))
        self.long_tokens = int_box(
            1, 1 << 20, 6000, "Prompt tokens of the long request (clipped to the model's context)."
        )
        long_prompt = QPushButton("Inject one long prompt")
        long_prompt.clicked.connect(lambda: self._inject(1, self.long_tokens, 16, "long"))

        self.presets = QListWidget()
        for name in preset_names():
            variants = load_preset(name).variants
            self.presets.addItems([f"{name} / {variant}" for variant in variants] or [name])
        self.presets.setToolTip(
            "Double-click (or Enter) to load and run a preset: its engine settings, traffic, events and SLOs."
        )
        # Activated: a double-click, or Enter on the selected entry.
        self.presets.itemActivated.connect(lambda item: self._preset_activated(item.text()))

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
        labels = {
            "rate": "rate (req/s)",
            "end_rate": "end rate (req/s)",
            "time_scale": "time scale",
            "trace_start_s": "from (trace s)",
            "shared_prefix_tokens": "shared prefix tokens",
            "think_time_s": "think time (s)",
        }
        arrival_boxes = [name for process in ARRIVALS.values() for name in process.settings]
        rows = [("arrival", self.arrival)]
        rows += [
            (labels.get(name, name.replace("_", " ")), self.setting_boxes[name])
            for name in dict.fromkeys(arrival_boxes)
        ]
        rows += [("duration (s)", self.duration), ("requests", self.num_requests), ("prompts", self.prompts)]
        rows += [("trace", self.trace_file)]
        rows += [
            (labels.get(name, name.replace("_", " ")), box)
            for name, box in self.setting_boxes.items()
            if name not in arrival_boxes
        ]
        for label, widget in rows:
            shape.addRow(label, widget)
        self.prompt_len.add_rows(shape)
        self.output_len.add_rows(shape)
        shape.addRow("seed", self.seed)
        self.traffic_box = traffic_box = QGroupBox("Traffic")
        traffic_layout = QVBoxLayout(traffic_box)
        traffic_layout.addWidget(self.preset_label)
        traffic_layout.addWidget(self.events)
        traffic_layout.addLayout(shape)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.pause_button, self.stop_button):
            buttons.addWidget(button)
        traffic_layout.addLayout(buttons)

        self.inject_box = inject_box = QGroupBox("Inject")
        inject = QFormLayout(inject_box)
        inject.addRow("chats", self.burst_count)
        inject.addRow("chat prompt tokens", self.burst_prompt)
        inject.addRow(burst)
        inject.addRow("long prompt tokens", self.long_tokens)
        inject.addRow(long_prompt)

        self.slo_box = slo_box = QGroupBox("SLOs (set before the run)")
        slo = QFormLayout(slo_box)
        slo.addRow("TTFT (ms)", self.ttft_slo)
        slo.addRow("TPOT (ms/token)", self.tpot_slo)
        slo.addRow("e2e (ms)", self.e2e_slo)

        # The window puts the presets first in its controls column (a newcomer's first choice, and
        # under the 45 fields only 4 of 13 showed); every entry shows without scrolling.
        self.presets_box = QGroupBox("Presets (double-click or Enter to run)")
        QVBoxLayout(self.presets_box).addWidget(self.presets)
        self.presets.setMinimumHeight(
            self.presets.sizeHintForRow(0) * self.presets.count() + 2 * self.presets.frameWidth()
        )

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for box in (traffic_box, inject_box, slo_box):
            layout.addWidget(box)
        self.arrival.currentTextChanged.connect(self._show_fields)
        self.prompts.currentTextChanged.connect(self._show_fields)
        self._show_fields()

    def _inject(self, count: QSpinBox | int, prompt_tokens: QSpinBox, output_tokens: int, tag: str) -> None:
        """Inject, unless a field of the Inject box holds typing it refused: a refused "0" would
        otherwise go back to the last valid count and that many would be injected."""
        if refused := refused_typing(self.inject_box):
            self.invalid.emit(f"inject: {refused}")
            return
        how_many = count if isinstance(count, int) else count.value()
        self.inject_requested.emit(how_many, prompt_tokens.value(), output_tokens, tag, self.slo())

    def hide_preset(self) -> None:
        """Once Start has begun a run of the fields: they, not the preset, are what runs."""
        self.preset_label.setVisible(False)
        self.events.setVisible(False)

    def _preset_activated(self, entry: str) -> None:
        """Ask for the preset to run. The fields stay as they are until the window has said yes
        (a "No" to the switch leaves the fields, and so the next Start, as they were)."""
        applied = dataclasses.asdict(self.applied_engine) if self.applied_engine is not None else None
        try:
            scenario = self.preset_scenario(entry, applied)
        except ConfigError as error:  # a preset file edited since the list was filled
            self.invalid.emit(f"preset {entry}: {error}")
            return
        self.preset_chosen.emit(scenario, entry)

    def _settings_read(self) -> list[str]:
        """The single-valued settings the traffic as chosen reads: the arrival process's (none
        where the source brings its own arrivals) and the prompt source's."""
        source = PROMPT_SOURCES[self.prompts.currentText()]
        arrival = () if source.recorded else ARRIVALS[self.arrival.currentText()].settings
        return list(dict.fromkeys((*arrival, *source.settings)))

    def replays_trace(self) -> bool:
        return PROMPT_SOURCES[self.prompts.currentText()].recorded

    def _show_fields(self) -> None:
        """Only the fields the traffic reads: the chosen arrival process's and prompt source's."""
        trace = self.replays_trace()
        read = self._settings_read()
        for name, widget in self.setting_boxes.items():
            self.shape.setRowVisible(widget, name in read)
        self.shape.setRowVisible(self.arrival, not trace)
        self.shape.setRowVisible(self.trace_file, trace)
        self.prompt_len.set_shown(not trace)
        self.output_len.set_shown(not trace)
        self.num_requests.setSpecialValueText("the whole trace" if trace else "no limit")

    @staticmethod
    def preset_scenario(entry: str, engine_defaults: dict | None = None) -> Scenario:
        """ "name" or "name / variant", as listed; `engine_defaults` (the engine applied) fills the
        [engine] settings the preset leaves out."""
        name, _, variant = entry.partition(" / ")
        return load_preset(name, variant=variant or None, engine_defaults=engine_defaults)

    def slo(self) -> SLO:
        def threshold(box: QDoubleSpinBox) -> float | None:
            return box.value() or None

        return SLO(ttft_ms=threshold(self.ttft_slo), tpot_ms=threshold(self.tpot_slo), e2e_ms=threshold(self.e2e_slo))

    def scenario(self) -> Scenario:
        """What Start runs: the fields; after a preset, its traffic with the fields' values (and
        named after it, "(edited)" once a field differs)."""
        name, preset_traffic = self._preset or ("interactive", None)
        shown = {"duration_s": self.duration.value(), "num_requests": self.num_requests.value()}
        # What the fields shown read; the rest stays the preset's (a trace's arrivals and lengths
        # as recorded).
        shown.update({name: self.setting_boxes[name].value() for name in self._settings_read()})
        if not self.replays_trace():
            shown.update(
                arrival=self.arrival.currentText(),
                prompts=self.prompts.currentText(),
                prompt_len=self.prompt_len.distribution(),
                output_len=self.output_len.distribution(),
            )
        # Checked once, with the fields' values: a source whose check refuses the defaults (a
        # setting that must be set) is built from what the fields say, not from the defaults.
        traffic = dataclasses.replace(preset_traffic or TrafficProfile(), **shown)
        if self._preset is not None and traffic != preset_traffic:
            name += " (edited)"
        return Scenario(name=name, traffic=traffic, slo=self.slo(), seed=self.seed.value())

    def show_scenario(self, scenario: Scenario, label: str | None = None) -> None:
        """Reflect a preset's traffic and SLOs in the controls, and say what the preset runs: a
        preset with only a timeline of events leaves the fields as they were, for the next Start;
        and what it changes of the engine applied before it (`engine_changes`). `label`: how the
        preset is listed ("name / variant")."""
        engine = engine_changes(self.applied_engine, scenario.engine)
        traffic = scenario.traffic
        label = label or scenario.name
        timeline = " and the timeline below" if scenario.events else ""
        if traffic is None:
            only = ", only the timeline below" if timeline else ""
            what = f"no background traffic{only}. The fields below are for Start"
        else:
            what = f"the fields below show its traffic{timeline}"
        name, _, variant = label.partition(" / ")
        variant = f", variant {variant!r}" if variant else ""
        self.preset_label.setText(f"Preset {name!r}{variant}: {what}. {engine}")
        self._preset = (label, traffic) if traffic is not None else None
        self.preset_label.setVisible(True)
        self.events.setRowCount(len(scenario.events))
        for row, event in enumerate(scenario.events):
            self.events.setItem(row, 0, QTableWidgetItem(f"{event.at_s:g}"))
            self.events.setItem(row, 1, QTableWidgetItem(describe_event(event)))
        self.events.setVisible(bool(scenario.events))
        if traffic is not None:
            self.arrival.setCurrentText(traffic.arrival)
            for name, box in self.setting_boxes.items():
                value = getattr(traffic, name)
                if name == "end_rate" and not value:  # a ramp's end rate unset (0): the field keeps its valid one
                    value = box.value()
                box.setValue(value)
            self.duration.setValue(traffic.duration_s)
            self.num_requests.setValue(traffic.num_requests)
            if self.prompts.findText(traffic.prompts) < 0:  # a trace: the preset's file, kept for Start
                self.prompts.addItem(traffic.prompts)
            self.prompts.setCurrentText(traffic.prompts)
            if PROMPT_SOURCES[traffic.prompts].recorded:
                self.trace_file.setText(
                    f"{Path(traffic.trace_file).name}: arrival times, prompt and output lengths as recorded"
                )
            self.prompt_len.show(traffic.prompt_len)
            self.output_len.show(traffic.output_len)
        self.seed.setValue(scenario.seed)
        self.ttft_slo.setValue(scenario.slo.ttft_ms or 0)
        self.tpot_slo.setValue(scenario.slo.tpot_ms or 0)
        self.e2e_slo.setValue(scenario.slo.e2e_ms or 0)


def engine_changes(applied: EngineConfig | None, preset: EngineConfig) -> str:
    """What a preset does to the engine applied before it, in the words the preset label uses:
    the settings it sets, the rest kept as applied."""
    if applied is None:
        return "Engine: the preset's"
    before, after = dataclasses.asdict(applied), dataclasses.asdict(preset)
    changed = [f"{name} = {after[name]!r}" for name in after if after[name] != before[name]]
    if not changed:
        return "Engine: as applied"
    return f"Engine: as applied, with the preset's {', '.join(changed)}"


def _plain_box(name: str) -> QWidget:
    """A field for a TrafficProfile setting that an arrival process or prompt source reads and no
    box was made for: a number box from the field's type and default."""
    field = next(each for each in dataclasses.fields(TrafficProfile) if each.name == name)
    tip = f"{name}: a setting of the traffic (TrafficProfile.{name})."
    if field.type in ("int", int):
        return int_box(0, 1 << 30, field.default, tip)
    return float_box(0, 1e9, field.default, tip, 3)


def describe_event(event: ScenarioEvent) -> str:
    if event.action == "inject":
        return f"inject {event.count} × {event.prompt_tokens}+{event.output_tokens}-token {event.tag!r}"
    if event.action == "set_rate":
        return f"rate {event.rate:g} req/s"
    return "stop the traffic"
