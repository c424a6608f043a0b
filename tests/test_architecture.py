"""The layout's rules, read from the source (every import, function-local ones included):

- engine/ and kernels/ never import workbench (the engine is usable alone);
- the lab's rooms and the engine's import only rooms in the layers below theirs (`LAB_LAYERS`,
  `ENGINE_LAYERS`; the engine's rooms also the floor beneath them), and `cli/` reaches the
  window only through `cli/gui.py` (the headless commands draw PNGs with `gui/charts/` alone);
- only workbench/gui/ (the widgets, and `charts/`: plots drawn offscreen) and benchmarks/
  (measurements of the window) import Qt (PySide6, pyqtgraph);
- no import cycles between our modules;
- nothing builds an object around its constructor with `__new__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "kernels", "workbench", "benchmarks")
QT = ("PySide6", "pyqtgraph")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module this file imports (from-imports name the module itself)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from engine import errors`
    return names


SOURCES = {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}
IMPORTS = {name: imports_of(path) for name, path in SOURCES.items()}


def ours(imported: set[str]) -> set[str]:
    return {name for name in imported if name in SOURCES}


@pytest.mark.parametrize("package", ["engine", "kernels"])
def test_the_engine_and_kernels_never_import_the_lab(package):
    offenders = {
        name: sorted(imported)
        for name, imported in IMPORTS.items()
        if name.split(".")[0] == package
        for imported in [{i for i in imported if i.split(".")[0] in ("workbench", "benchmarks")}]
        if imported
    }
    assert not offenders


def test_the_gui_package_holds_widgets_only():
    """What needs no Qt lives in the lab, where the headless runs and the tests reach it without a
    window (replaying a run log, saving and opening runs, the window's measurements). The one
    exception runs before Qt can load: the check of Qt's X11 plugin's system libraries."""
    qt_free = sorted(
        name
        for name, imported in IMPORTS.items()
        if name.startswith("workbench.gui.")
        and name != "workbench.gui.system_libraries"
        and SOURCES[name].name != "__init__.py"  # a subpackage's docstring (gui/charts/)
        and not {i for i in imported if i.split(".")[0] in QT}
    )
    assert qt_free == []


def test_only_the_gui_package_and_benchmarks_import_qt():
    offenders = {
        name: sorted(imported)
        for name, imported in IMPORTS.items()
        if not name.startswith(("workbench.gui", "benchmarks"))
        for imported in [{i for i in imported if i.split(".")[0] in QT}]
        if imported
    }
    assert not offenders


# The lab's rooms, bottom up (napari's import contracts): a room imports the engine, its own
# modules and the rooms of lower layers only; rooms on one layer do not import each other.
LAB_LAYERS = [
    {"machine", "quality"},  # this machine and process; what a configuration costs in quality
    {"backends"},  # what serves the requests
    {"step_traces"},  # each engine step's record
    {"traffic"},  # what to send
    {"runs"},  # drive a backend and record
    {"analysis"},  # the questions asked of runs
    {"session"},  # one run from its folder's lock to its report files: the window's and headless
    {"live"},  # the window's Qt-free models: its state, its metrics, an opened run
    {"bench"},  # whole runs with their report and files
    {"gui", "server"},  # the window; workbench serve
    {"cli"},  # the command line, which starts either
]
# The engine's rooms, bottom up, by the same rule. Below them the floor (errors, settings:
# imported by any room); above them the engine itself (llm_engine.py, the engine core, the
# deployment of several engines, the demo), which imports any room.
ENGINE_LAYERS = [
    {"platform"},  # the device, the cache directory, packaged files
    {"model_spec"},  # a model's shape, its architecture's facts, its KV layout
    {"loading", "quantization"},  # files into tensors and a tokenizer; weights into fewer bits
    {"configuration", "requests"},  # EngineConfig and the memory model; a request's life as data
    {"scheduling"},  # continuous batching over paged KV blocks
    {"execution"},  # a step's batch on a device: executor, model, sampler, compiled graphs
    {"simulation"},  # the executor as a cost model on simulated GPUs
]
ENGINE_FLOOR = {"engine.errors", "engine.settings"}
ENGINE_TOP = ["engine", "engine.core", "engine.demo", "engine.deployment", "engine.llm_engine"]


class Rooms:
    """Rooms on layers inside one package: `room_of` names a module's room (None outside them)."""

    def __init__(self, package: str, layers: list[set[str]]):
        self.package = package
        self.layer_of = {room: level for level, rooms in enumerate(layers) for room in rooms}

    def room_of(self, module: str) -> str | None:
        parts = module.split(".")
        in_room = parts[0] == self.package and len(parts) > 1 and parts[1] in self.layer_of
        return parts[1] if in_room else None

    def breaches(self, imports: dict[str, set[str]], floor: frozenset[str] = frozenset()) -> list[str]:
        """Imports that run sideways or up between rooms, or from a room (or the floor) to a module
        of the package that is in no room and not on the floor (the package's top)."""
        found = []
        for name, imported in imports.items():
            room = self.room_of(name)
            if room is None and name not in floor:
                continue
            for other in sorted(i for i in imported if i.split(".")[0] == self.package and i in SOURCES):
                target = self.room_of(other)
                if target == room or other in floor:
                    continue
                if target is None or room is None or self.layer_of[target] >= self.layer_of[room]:
                    found.append(f"{name} imports {other}")
        return found


LAB = Rooms("workbench", LAB_LAYERS)
ENGINE = Rooms("engine", ENGINE_LAYERS)


def test_every_module_of_the_lab_is_in_a_room():
    loose = [name for name in SOURCES if name.startswith("workbench.") and LAB.room_of(name) is None]
    assert loose == ["workbench.__main__"]


def test_every_module_of_the_engine_is_in_a_room_on_the_floor_or_at_the_top():
    loose = sorted(name for name in SOURCES if name.split(".")[0] == "engine" and ENGINE.room_of(name) is None)
    assert loose == sorted([*ENGINE_FLOOR, *ENGINE_TOP])


def test_the_labs_rooms_import_only_the_layers_below():
    assert LAB.breaches(IMPORTS) == []


def test_the_engines_rooms_import_only_the_floor_and_the_layers_below():
    assert ENGINE.breaches(IMPORTS, frozenset(ENGINE_FLOOR)) == []


def test_the_layer_check_finds_a_planted_breach():
    planted = {**IMPORTS, "workbench.runs.runner": IMPORTS["workbench.runs.runner"] | {"workbench.analysis.report"}}
    assert LAB.breaches(planted) == ["workbench.runs.runner imports workbench.analysis.report"]
    upward = "engine.simulation.executor"
    planted = {**IMPORTS, upward: IMPORTS[upward] | {"engine.llm_engine", "engine.errors"}}
    assert ENGINE.breaches(planted, frozenset(ENGINE_FLOOR)) == [f"{upward} imports engine.llm_engine"]


def test_the_command_line_reaches_the_window_only_through_its_gui_command():
    reaching = sorted(
        name
        for name, imported in IMPORTS.items()
        if name.startswith("workbench.cli")
        and any(
            other.startswith("workbench.gui") and not other.startswith("workbench.gui.charts") for other in imported
        )
    )
    assert reaching == ["workbench.cli.gui"]


def test_the_window_and_its_models_do_not_import_torch():
    """Issue 49 #3: the Memory tab's breakdown comes from the backend's info (its device memory
    measured at load), so no widget or live model needs torch."""
    offenders = sorted(
        name
        for name, imported in IMPORTS.items()
        if name.startswith(("workbench.gui", "workbench.live")) and any(i.split(".")[0] == "torch" for i in imported)
    )
    assert offenders == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for neighbour in sorted(graph.get(node, ())):
            if state.get(neighbour) == "open":
                return path[path.index(neighbour) :] + [neighbour] if neighbour in path else [node, neighbour]
            if neighbour not in state and (cycle := visit(neighbour, path + [neighbour])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_our_modules_import_each_other_without_cycles():
    # A package's __init__ re-exporting its modules is not a cycle with them.
    graph = {
        name: {other for other in ours(imported) if not name.startswith(other + ".") and other != name}
        for name, imported in IMPORTS.items()
    }
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_object_is_built_around_its_constructor():
    offenders = [name for name, path in SOURCES.items() if "__new__(" in path.read_text()]
    assert not offenders


def test_only_the_quantization_registry_dispatches_on_method_names():
    """Issue 13: a new format touched six files because code compared `quantization == "int4"`.
    Every method's facts now come from engine.quantization.METHODS."""
    from engine.quantization import METHODS

    def compares_a_method_name(node: ast.AST) -> bool:
        if not isinstance(node, ast.Compare):
            return False
        operands = [node.left, *node.comparators]
        literals = [
            element
            for operand in operands
            for element in (operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand])
        ]
        return any(isinstance(literal, ast.Constant) and literal.value in METHODS for literal in literals)

    offenders = sorted(
        f"{name}:{node.lineno}"
        for name, path in SOURCES.items()
        if not name.startswith("engine.quantization")
        for node in ast.walk(ast.parse(path.read_text()))
        if compares_a_method_name(node)
    )
    assert not offenders


def places(sources: dict[str, Path], found, outside: tuple[str, ...] = ()) -> list[str]:
    """ "module:line" of every node of `sources` (but the modules `outside`) for which `found` holds."""
    return sorted(
        f"{name}:{node.lineno}"
        for name, path in sources.items()
        if name not in outside
        for node in ast.walk(ast.parse(path.read_text()))
        if found(node)
    )


def compares_an_architecture_name(node: ast.AST) -> bool:
    """`config.architecture == "llama"`, `architecture in ("qwen2", ...)`, `arch.startswith("gemma")`:
    an expression about an architecture that names one."""
    from engine.model_spec.architectures import ARCHITECTURES

    if not isinstance(node, (ast.Compare, ast.Call)):
        return False
    if isinstance(node, ast.Call) and not (
        isinstance(node.func, ast.Attribute) and node.func.attr in ("startswith", "endswith")
    ):
        return False
    text = ast.unparse(node)
    literals = {child.value for child in ast.walk(node) if isinstance(child, ast.Constant)}
    named = any(isinstance(value, str) and any(name.startswith(value) for name in ARCHITECTURES) for value in literals)
    return "architecture" in text and named


def architecture_name_comparisons(sources: dict[str, Path]) -> list[str]:
    return places(sources, compares_an_architecture_name, outside=("engine.architectures",))


def test_only_the_architecture_registry_dispatches_on_architecture_names():
    """Issue 49 #4: a new architecture touched five files by name comparisons (`qk_norm=architecture
    == "qwen3"` in both loaders). Every architecture's facts now come from engine/model_spec/architectures.py."""
    assert architecture_name_comparisons(SOURCES) == []


def test_the_architecture_check_finds_a_planted_comparison(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'qk_norm = architecture == "qwen3"\n'
        'gemma = str(metadata.get("general.architecture", "")).startswith("gemma")\n'
        'kind_is_sentencepiece = kind == "llama"\n'  # a tokenizer kind, not an architecture: allowed
    )
    assert architecture_name_comparisons({"planted": planted}) == ["planted:1", "planted:2"]


def name_comparisons(
    sources: dict[str, Path], *, names: set, about: tuple[str, ...], outside: tuple[str, ...], always: set = frozenset()
) -> list[str]:
    """Comparisons with a literal among `names` whose text mentions one of the words `about`
    (`traffic.arrival == "closed_loop"`), or with a literal among `always` wherever it stands;
    in any module but the registries `outside`."""

    def compares(node: ast.AST) -> bool:
        if not isinstance(node, ast.Compare):
            return False
        text = ast.unparse(node)
        literals = {child.value for child in ast.walk(node) if isinstance(child, ast.Constant)}
        return bool(literals & always) or (bool(literals & names) and any(word in text for word in about))

    return places(sources, compares, outside)


def traffic_name_comparisons(sources: dict[str, Path]) -> list[str]:
    """`traffic.arrival == "closed_loop"`, `profile.prompts != "trace"`: a traffic setting compared
    with a name of the arrival or prompt-source registries."""
    from workbench.traffic.arrivals import ARRIVALS
    from workbench.traffic.sources import PROMPT_SOURCES

    registries = ("workbench.traffic.arrivals", "workbench.traffic.sources")
    names = set(ARRIVALS) | set(PROMPT_SOURCES)
    return name_comparisons(sources, names=names, about=("arrival", "prompts"), outside=registries)


def test_only_the_traffic_registries_dispatch_on_arrival_and_source_names():
    """Issue 49 #4: a new traffic source meant new branches among 16 string comparisons."""
    assert traffic_name_comparisons(SOURCES) == []


def test_the_traffic_check_finds_a_planted_comparison(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('if scenario.traffic.arrival == "closed_loop":\n    pass\nif kind == "trace":\n    pass\n')
    assert traffic_name_comparisons({"planted": planted}) == ["planted:1"]


def speculation_name_comparisons(sources: dict[str, Path]) -> list[str]:
    """`config.speculative_method == "ngram"`, `method != "off"`: a choice made by comparing a
    speculation method's name. "off" is also another setting's value (compile_decode), so it counts
    only where the comparison is about speculation."""
    from engine.configuration.speculation_methods import SPECULATION_METHODS

    proposing = {name for name, method in SPECULATION_METHODS.items() if method.proposes}
    return name_comparisons(
        sources,
        names=set(SPECULATION_METHODS),
        about=("specul",),
        outside=("engine.configuration.speculation_methods",),
        always=proposing,
    )


def test_only_the_speculation_registry_dispatches_on_method_names():
    """Issue 79 #5: a new speculation method touched six files, its name compared in the config, the
    engine, the simulation and the engine panel. Each method's facts now come from
    engine/configuration/speculation_methods.py."""
    assert speculation_name_comparisons(SOURCES) == []


def test_the_speculation_check_finds_a_planted_comparison(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'greedy_only = config.speculative_method == "ngram"\n'
        'speculates = config.speculative_method != "off"\n'
        'eager = compile_decode == "off"\n'  # another setting's "off": allowed
    )
    assert speculation_name_comparisons({"planted": planted}) == ["planted:1", "planted:2"]


def hand_made_target_names(sources: dict[str, Path]) -> list[str]:
    """f"simulated:{model}@{gpu}" and `.startswith("simulated:")`: a simulated target's name written
    or recognised by hand rather than by engine/simulation/target.py's `target_name` and
    `is_simulated`."""

    def by_hand(node: ast.AST) -> bool:
        if isinstance(node, ast.JoinedStr):
            first = node.values[0] if node.values else None
            text = str(first.value) if isinstance(first, ast.Constant) else ""
            return text.startswith("simulated:") and not text.startswith("simulated: ")  # not a caption
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            return any(isinstance(arg, ast.Constant) and arg.value == "simulated:" for arg in node.args)
        return False

    return places(sources, by_hand, outside=("engine.simulation.target",))


def test_simulated_targets_are_named_and_recognised_in_one_place():
    """Issue 79 #5: `simulated:` targets were formatted by hand in 4 places and their prefix tested
    by hand in 2."""
    assert hand_made_target_names(SOURCES) == []


def test_the_target_check_finds_planted_hand_made_names(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'model = f"simulated:{name}@{gpu}"\n'
        'simulated = str(path).startswith("simulated:")\n'
        'note = f"simulated: {figure}"\n'  # a caption that starts with the word: allowed
    )
    assert hand_made_target_names({"planted": planted}) == ["planted:1", "planted:2"]


def engine_steps_outside_the_core(sources: dict[str, Path]) -> list[str]:
    """`engine.step()`, `self.engine.step()`, `instances[i].step()`: an LLMEngine stepped directly,
    outside the core's rules (a failed step ends its requests; EngineBroken when that fails too)."""

    def steps_an_engine(node: ast.AST) -> bool:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "step"):
            return False
        owner = node.func.value
        while isinstance(owner, ast.Subscript):
            owner = owner.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        return name in ("engine", "instances")

    return places(sources, steps_an_engine, outside=("engine.core", "engine.llm_engine"))


def test_every_engine_is_stepped_through_the_core():
    """Issue 79 #2: deployments, the quality measurement, the published runs' replay, the demo and
    the benchmarks stepped LLMEngine directly, so a failed step there was not contained."""
    assert engine_steps_outside_the_core(SOURCES) == []


def test_the_step_check_finds_planted_direct_steps(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "result = engine.step()\n"
        "result = self.instances[index].step()\n"
        "result = core.step()\n"  # through the core: allowed
    )
    assert engine_steps_outside_the_core({"planted": planted}) == ["planted:1", "planted:2"]


def test_tests_import_helpers_from_modules_of_their_own():
    """Not from conftest.py (pytest's, loaded its own way) nor from another test module (importing
    one collects its tests' module state twice): shared helpers live in helper modules."""
    offenders = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for name in imports_of(path)
        if name.startswith("tests.")
        and (
            name.split(".")[-1] == "conftest"
            or name.split(".")[-1].startswith("test_")
            or ".conftest." in name
            or ".test_" in name
        )
    )
    assert offenders == []


def test_the_main_window_wires_and_the_view_models_decide():
    """Issue 60 #5: MainWindow had grown to 853 lines of layout, decisions and wiring. What the
    panes show is decided in Qt-free view models (workbench/live/), unit-tested without a window;
    the window lays out and wires, in at most 550 lines."""
    lines = len((ROOT / "workbench" / "gui" / "main_window.py").read_text().splitlines())
    assert lines <= 550, f"main_window.py has {lines} lines: move a decision into a view model"
