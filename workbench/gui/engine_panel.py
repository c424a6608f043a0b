"""The engine panel: every EngineConfig knob, with a tooltip saying what it trades."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPushButton,
    QToolButton,
    QVBoxLayout,
)

from engine.configuration.config import (
    COMPILE_DECODE_CHOICES,
    DTYPES,
    KV_CACHE_DTYPES,
    SCHEDULING_POLICIES,
    SPECULATIVE_SCHEDULES,
    EngineConfig,
    knob_help,
)
from engine.configuration.speculation_methods import SPECULATION_METHODS
from engine.errors import ConfigError
from engine.loading.bundled_models import BUNDLED_MODELS
from engine.quantization import METHODS, all_group_sizes
from engine.quantization.auto import AUTO
from engine.simulation import SimulatedTarget, is_simulated
from engine.simulation.catalogue import listed_targets
from engine.simulation.serving_stacks import AUTO as AUTO_STACK
from engine.simulation.serving_stacks import stack_names
from workbench.gui.form_widgets import ChoiceBox, choice_box, emit_validated, float_box, int_box


class EnginePanel(QGroupBox):
    apply_requested = Signal(object)  # EngineConfig
    invalid = Signal(str)  # a configuration error, for the status line (never an exception in a slot)

    def __init__(self):
        super().__init__("Engine")
        defaults = EngineConfig()
        self.model = ChoiceBox()
        self.model.setEditable(True)
        # Sized for the bundled model's name, not the longest simulated entry: the column stays narrow.
        self.model.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model.setMinimumContentsLength(len("smollm2-135m") + 2)
        self.model.addItems(list(BUNDLED_MODELS))
        self.model.addItems(listed_targets())  # every catalogued model (presets/catalogue/models.toml)
        self.model.setToolTip(knob_help("model"))
        # The list opens as wide as its longest entry, whatever the narrow field: cut to the field's
        # width, "simulated:llama-2-7b@…" and "simulated:llama-3-8b@…" read the same. Every entry in
        # view at once: a scroll bar would take a share of that width.
        self.model.setMaxVisibleItems(self.model.count())
        view = self.model.view()
        view.setMinimumWidth(view.sizeHintForColumn(0) + 2 * view.frameWidth())
        # One narrow button with a menu keeps the controls column narrow.
        self.browse = QToolButton()
        self.browse.setText("…")
        self.browse.setToolTip("Open a model from disk: a .gguf file or a Hugging Face folder")
        self.browse.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        browse_menu = QMenu(self.browse)
        browse_menu.addAction("GGUF file…", self._pick_file)
        browse_menu.addAction("Hugging Face folder…", self._pick_folder)
        self.browse.setMenu(browse_menu)
        self.device = ChoiceBox()
        self.device.addItems(["auto", "cpu", "cuda"])
        self.device.setToolTip(knob_help("device"))
        self.dtype = ChoiceBox()
        self.dtype.addItems(list(DTYPES))
        self.dtype.setToolTip(knob_help("dtype"))
        self.kv_cache_dtype = ChoiceBox()
        self.kv_cache_dtype.addItems(list(KV_CACHE_DTYPES))
        self.kv_cache_dtype.setToolTip(knob_help("kv_cache_dtype"))
        self.quantization = ChoiceBox()
        self.quantization.addItems([AUTO, *METHODS])
        self.quantization.setToolTip(knob_help("quantization"))
        self.group_size = ChoiceBox()
        self.group_size.addItems([str(size) for size in all_group_sizes()])
        self.group_size.setToolTip(knob_help("group_size"))
        self.quantize_head = QCheckBox("quantize LM head")
        self.quantize_head.setToolTip(knob_help("quantize_lm_head"))
        self.batched_copy = QCheckBox("bf16 copy for batches")
        self.batched_copy.setToolTip(knob_help("batched_bf16_copy"))
        self.quantization.currentTextChanged.connect(self._offer_group_sizes)
        self._offer_group_sizes(self.quantization.currentText())
        self.compile_decode = ChoiceBox()
        self.compile_decode.addItems(COMPILE_DECODE_CHOICES)
        self.compile_decode.setToolTip(knob_help("compile_decode"))
        self.kv_cache_mib = int_box(
            0,
            1 << 20,
            0,
            knob_help("kv_cache_memory"),
            64,
        )
        self.kv_cache_mib.setSpecialValueText("auto")
        # A preset may size the cache by block count (kv-pressure) or as a fraction of free
        # memory, which a MiB box cannot show: both are kept, and named below the box, until the
        # size is edited.
        self._num_kv_blocks: int | None = None
        self._kv_cache_fraction: float | None = None
        self.kv_cache_source = QLabel()
        self.kv_cache_mib.valueChanged.connect(lambda _: self._set_preset_cache_size(None, None))
        self.block_size = int_box(
            1,
            256,
            defaults.block_size,
            knob_help("block_size"),
        )
        self.max_num_seqs = int_box(
            1,
            4096,
            defaults.max_num_seqs,
            knob_help("max_num_seqs"),
        )
        self.max_tokens = int_box(
            1,
            1 << 20,
            defaults.max_num_batched_tokens,
            knob_help("max_num_batched_tokens"),
            64,
        )
        self.chunked = QCheckBox("chunked prefill")
        self.chunked.setChecked(defaults.enable_chunked_prefill)
        self.chunked.setToolTip(knob_help("enable_chunked_prefill"))
        self.long_threshold = int_box(
            0,
            1 << 20,
            defaults.long_prompt_threshold,
            knob_help("long_prompt_threshold"),
            64,
        )
        self.long_prefills = int_box(1, 64, defaults.max_long_prefills, knob_help("max_long_prefills"))
        # Simulated models on several GPUs ("simulated:llama-3-70b@4xh100-80gb"): how they split.
        self.tensor_parallel = int_box(1, 64, defaults.tensor_parallel_size, knob_help("tensor_parallel_size"))
        self.pipeline_parallel = int_box(1, 64, defaults.pipeline_parallel_size, knob_help("pipeline_parallel_size"))
        self.model.currentTextChanged.connect(self._split_across_its_gpus)
        # The serving software a simulated GPU's times include (presets/catalogue/stacks.toml).
        self.serving_stack = QComboBox()
        self.serving_stack.addItems([AUTO_STACK, *stack_names()])
        self.serving_stack.setCurrentText(defaults.serving_stack)
        self.serving_stack.setToolTip(knob_help("serving_stack"))
        self.scheduler_steps = int_box(1, 64, defaults.num_scheduler_steps, knob_help("num_scheduler_steps"))
        self.long_max_wait = float_box(
            0,
            1e6,
            defaults.long_prompt_max_wait_s,
            knob_help("long_prompt_max_wait_s"),
            1,
        )
        self.policy = ChoiceBox()
        self.policy.addItems(list(SCHEDULING_POLICIES))
        self.policy.setToolTip(knob_help("scheduling_policy"))
        # Speculative decoding (docs/speculation.md): ngram on the real engine, draft on simulated GPUs.
        self.speculative_method = choice_box(list(SPECULATION_METHODS), knob_help("speculative_method"))
        self.speculative_tokens = int_box(1, 64, defaults.num_speculative_tokens, knob_help("num_speculative_tokens"))
        self.speculative_schedule = choice_box(
            list(SPECULATIVE_SCHEDULES), knob_help("num_speculative_tokens_schedule")
        )
        self.lookup_min = int_box(1, 64, defaults.prompt_lookup_min, knob_help("prompt_lookup_min"))
        self.lookup_max = int_box(1, 64, defaults.prompt_lookup_max, knob_help("prompt_lookup_max"))
        self.draft_acceptance = float_box(0, 1, defaults.draft_acceptance_rate, knob_help("draft_acceptance_rate"))
        self.draft_cost = float_box(0, 1, defaults.draft_cost_fraction, knob_help("draft_cost_fraction"))
        self.speculative_method.currentTextChanged.connect(self._offer_speculation_settings)
        self._offer_speculation_settings(self.speculative_method.currentText())
        self.prefix_caching = QCheckBox("prefix caching")
        self.prefix_caching.setChecked(defaults.enable_prefix_caching)
        self.prefix_caching.setToolTip(knob_help("enable_prefix_caching"))
        self.apply_button = QPushButton("Apply and load")
        self.apply_button.setToolTip(
            "Reload the engine with these settings (requests in flight are dropped after confirmation)."
        )
        self.apply_button.clicked.connect(
            lambda: emit_validated(self.config, self.apply_requested, self.invalid, "engine", (self,))
        )

        model_row = QHBoxLayout()
        model_row.addWidget(self.model, 1)
        model_row.addWidget(self.browse)
        form = QFormLayout()
        form.addRow("model", model_row)
        form.addRow("device", self.device)
        form.addRow("dtype", self.dtype)
        form.addRow("KV cache dtype", self.kv_cache_dtype)
        form.addRow("quantization", self.quantization)
        form.addRow("group size", self.group_size)
        form.addRow(self.quantize_head)
        form.addRow(self.batched_copy)
        form.addRow("KV cache (MiB)", self.kv_cache_mib)
        form.addRow("", self.kv_cache_source)
        form.addRow("block size (tokens)", self.block_size)
        form.addRow("max sequences", self.max_num_seqs)
        form.addRow("token budget / step", self.max_tokens)
        form.addRow("long-prompt threshold", self.long_threshold)
        form.addRow("max long prefills", self.long_prefills)
        form.addRow("long prompt max wait (s)", self.long_max_wait)
        form.addRow("policy", self.policy)
        form.addRow(self.chunked)
        form.addRow(self.prefix_caching)
        form.addRow("compile decode step", self.compile_decode)
        form.addRow("tensor parallel (GPUs)", self.tensor_parallel)
        form.addRow("pipeline parallel (stages)", self.pipeline_parallel)
        form.addRow("serving stack (simulated)", self.serving_stack)
        form.addRow("scheduler steps", self.scheduler_steps)
        form.addRow("speculation", self.speculative_method)
        form.addRow("speculative tokens", self.speculative_tokens)
        form.addRow("tokens schedule", self.speculative_schedule)
        lookup = QHBoxLayout()
        lookup.addWidget(self.lookup_min)
        lookup.addWidget(self.lookup_max)
        form.addRow("lookup min / max", lookup)
        draft = QHBoxLayout()
        draft.addWidget(self.draft_acceptance)
        draft.addWidget(self.draft_cost)
        form.addRow("draft accept / cost", draft)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.apply_button)

    def _offer_group_sizes(self, method: str) -> None:
        """Enable the group size chooser, and each size in it, only where the method reads them;
        with auto, the file decides both the group size and the head."""
        accepted = METHODS[method].group_sizes if method in METHODS else ()
        self.group_size.setEnabled(bool(accepted))
        self.quantize_head.setEnabled(method != AUTO)
        self.batched_copy.setEnabled(method in METHODS and METHODS[method].batched_copy_helps)
        model = self.group_size.model()
        for row in range(self.group_size.count()):
            model.item(row).setEnabled(int(self.group_size.itemText(row)) in accepted or not accepted)

    def _offer_speculation_settings(self, name: str) -> None:
        """Enable only the settings the chosen method reads (engine/configuration/speculation_methods.py:
        the lookup for ngram, the draft's acceptance and cost for draft, none with speculation off);
        the others are kept, not reset."""
        method = SPECULATION_METHODS[name]
        for box in (self.speculative_tokens, self.speculative_schedule):
            box.setEnabled(method.proposes)
        boxes = {
            "prompt_lookup_min": self.lookup_min,
            "prompt_lookup_max": self.lookup_max,
            "draft_acceptance_rate": self.draft_acceptance,
            "draft_cost_fraction": self.draft_cost,
        }
        for setting, box in boxes.items():
            box.setEnabled(setting in method.settings)

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "GGUF model", "", "GGUF (*.gguf)")
        if path:
            self.model.setCurrentText(path)

    def _pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Hugging Face model folder")
        if path:
            self.model.setCurrentText(path)

    def config(self) -> EngineConfig:
        """The panel's settings as a validated EngineConfig (raises ConfigError)."""
        return EngineConfig(
            model=self.model.currentText().strip(),
            device=self.device.currentText(),
            dtype=self.dtype.currentText(),
            kv_cache_dtype=self.kv_cache_dtype.currentText(),
            quantization=self.quantization.currentText(),
            group_size=int(self.group_size.currentText()),
            quantize_lm_head=self.quantize_head.isChecked(),
            batched_bf16_copy=self.batched_copy.isChecked() and self.batched_copy.isEnabled(),
            compile_decode=self.compile_decode.currentText(),
            kv_cache_memory=self._kv_cache_fraction or (self.kv_cache_mib.value() << 20) or None,
            num_kv_blocks=self._num_kv_blocks,
            block_size=self.block_size.value(),
            max_num_seqs=self.max_num_seqs.value(),
            max_num_batched_tokens=self.max_tokens.value(),
            enable_chunked_prefill=self.chunked.isChecked(),
            long_prompt_threshold=self.long_threshold.value(),
            max_long_prefills=self.long_prefills.value(),
            long_prompt_max_wait_s=self.long_max_wait.value(),
            scheduling_policy=self.policy.currentText(),
            enable_prefix_caching=self.prefix_caching.isChecked(),
            tensor_parallel_size=self.tensor_parallel.value(),
            pipeline_parallel_size=self.pipeline_parallel.value(),
            serving_stack=self.serving_stack.currentText(),
            num_scheduler_steps=self.scheduler_steps.value(),
            speculative_method=self.speculative_method.currentText(),
            num_speculative_tokens=self.speculative_tokens.value(),
            num_speculative_tokens_schedule=self.speculative_schedule.currentText(),
            prompt_lookup_min=self.lookup_min.value(),
            prompt_lookup_max=self.lookup_max.value(),
            draft_acceptance_rate=self.draft_acceptance.value(),
            draft_cost_fraction=self.draft_cost.value(),
        )

    def _split_across_its_gpus(self, model: str) -> None:
        """A simulated model named on several GPUs ("...@4xh100-80gb") whose split does not cover
        them takes tensor parallelism over all of them: the load would refuse the old split."""
        if not is_simulated(model):
            return
        try:
            count = SimulatedTarget.parse(model).gpu_count
        except ConfigError:  # still being typed: the load says what is wrong
            return
        if self.tensor_parallel.value() * self.pipeline_parallel.value() != count:
            self.tensor_parallel.setValue(count)
            self.pipeline_parallel.setValue(1)

    def set_config(self, config: EngineConfig) -> None:
        self.model.setCurrentText(config.model)
        self.device.setCurrentText(config.device)
        self.dtype.setCurrentText(config.dtype)
        self.kv_cache_dtype.setCurrentText(config.kv_cache_dtype)
        self.quantization.setCurrentText(config.quantization)
        self.group_size.setCurrentText(str(config.group_size))
        self.quantize_head.setChecked(config.quantize_lm_head)
        self.batched_copy.setChecked(config.batched_bf16_copy)
        self.compile_decode.setCurrentText(config.compile_decode)
        if config.kv_cache_memory is None:
            self.kv_cache_mib.setValue(0)
        elif isinstance(config.kv_cache_memory, int):
            self.kv_cache_mib.setValue(max(1, config.kv_cache_memory >> 20))
        fraction = config.kv_cache_memory if isinstance(config.kv_cache_memory, float) else None
        self._set_preset_cache_size(config.num_kv_blocks, fraction)
        self.block_size.setValue(config.block_size)
        self.max_num_seqs.setValue(config.max_num_seqs)
        self.max_tokens.setValue(config.max_num_batched_tokens)
        self.chunked.setChecked(config.enable_chunked_prefill)
        self.long_threshold.setValue(config.long_prompt_threshold)
        self.long_prefills.setValue(config.max_long_prefills)
        self.tensor_parallel.setValue(config.tensor_parallel_size)
        self.pipeline_parallel.setValue(config.pipeline_parallel_size)
        self.serving_stack.setCurrentText(config.serving_stack)
        self.scheduler_steps.setValue(config.num_scheduler_steps)
        self.long_max_wait.setValue(config.long_prompt_max_wait_s)
        self.policy.setCurrentText(config.scheduling_policy)
        self.prefix_caching.setChecked(config.enable_prefix_caching)
        self.speculative_method.setCurrentText(config.speculative_method)
        self.speculative_tokens.setValue(config.num_speculative_tokens)
        self.speculative_schedule.setCurrentText(config.num_speculative_tokens_schedule)
        self.lookup_min.setValue(config.prompt_lookup_min)
        self.lookup_max.setValue(config.prompt_lookup_max)
        self.draft_acceptance.setValue(config.draft_acceptance_rate)
        self.draft_cost.setValue(config.draft_cost_fraction)

    def _set_preset_cache_size(self, num_kv_blocks: int | None, fraction: float | None) -> None:
        self._num_kv_blocks, self._kv_cache_fraction = num_kv_blocks, fraction
        if num_kv_blocks is not None:
            note = f"set by the preset: {num_kv_blocks:,} blocks (edit the size to replace)"
        elif fraction is not None:
            note = f"set by the preset: {fraction:.0%} of free memory (edit the size to replace)"
        else:
            note = ""
        self.kv_cache_source.setText(note)
        self.kv_cache_source.setVisible(bool(note))
