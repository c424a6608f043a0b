"""The layout's rules, read from the source (every import, function-local ones included):

- engine/ and kernels/ never import workbench (the engine is usable alone);
- the lab's rooms import only rooms in the layers below theirs (`LAYERS`), and `cli/` reaches the
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
LAYERS = [
    {"machine", "quality"},  # this machine and process; what a configuration costs in quality
    {"backends"},  # what serves the requests
    {"step_traces"},  # each engine step's record
    {"traffic"},  # what to send
    {"runs"},  # drive a backend and record
    {"analysis"},  # the questions asked of runs
    {"live"},  # the window's Qt-free models: its state, its metrics, an opened run
    {"bench"},  # whole runs with their report and files
    {"gui", "server"},  # the window; workbench serve
    {"cli"},  # the command line, which starts either
]
LAYER_OF = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "workbench" and len(parts) > 1 and parts[1] in LAYER_OF else None


def layer_breaches(imports: dict[str, set[str]]) -> list[str]:
    breaches = []
    for name, imported in imports.items():
        room = room_of(name)
        for other in sorted(imported):
            target = room_of(other)
            if room is not None and target is not None and target != room and LAYER_OF[target] >= LAYER_OF[room]:
                breaches.append(f"{name} imports {other}")
    return breaches


def test_every_module_of_the_lab_is_in_a_room():
    loose = [name for name in SOURCES if name.startswith("workbench.") and room_of(name) is None]
    assert loose == ["workbench.__main__"]


def test_rooms_import_only_the_layers_below():
    assert layer_breaches(IMPORTS) == []


def test_the_layer_check_finds_a_planted_breach():
    planted = {**IMPORTS, "workbench.runs.runner": IMPORTS["workbench.runs.runner"] | {"workbench.analysis.report"}}
    assert layer_breaches(planted) == ["workbench.runs.runner imports workbench.analysis.report"]


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


def compares_an_architecture_name(node: ast.AST) -> bool:
    """`config.architecture == "llama"`, `architecture in ("qwen2", ...)`, `arch.startswith("gemma")`:
    an expression about an architecture that names one."""
    from engine.architectures import ARCHITECTURES

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
    return sorted(
        f"{name}:{node.lineno}"
        for name, path in sources.items()
        if name != "engine.architectures"
        for node in ast.walk(ast.parse(path.read_text()))
        if compares_an_architecture_name(node)
    )


def test_only_the_architecture_registry_dispatches_on_architecture_names():
    """Issue 49 #4: a new architecture touched five files by name comparisons (`qk_norm=architecture
    == "qwen3"` in both loaders). Every architecture's facts now come from engine/architectures.py."""
    assert architecture_name_comparisons(SOURCES) == []


def test_the_architecture_check_finds_a_planted_comparison(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'qk_norm = architecture == "qwen3"\n'
        'gemma = str(metadata.get("general.architecture", "")).startswith("gemma")\n'
        'kind_is_sentencepiece = kind == "llama"\n'  # a tokenizer kind, not an architecture: allowed
    )
    assert architecture_name_comparisons({"planted": planted}) == ["planted:1", "planted:2"]


def traffic_name_comparisons(sources: dict[str, Path]) -> list[str]:
    """`traffic.arrival == "closed_loop"`, `profile.prompts != "trace"`: a traffic setting compared
    with a name of the arrival or prompt-source registries."""
    from workbench.traffic.arrivals import ARRIVALS
    from workbench.traffic.sources import PROMPT_SOURCES

    names = set(ARRIVALS) | set(PROMPT_SOURCES)

    def compares(node: ast.AST) -> bool:
        if not isinstance(node, ast.Compare):
            return False
        text = ast.unparse(node)
        literals = {child.value for child in ast.walk(node) if isinstance(child, ast.Constant)}
        return bool(literals & names) and any(word in text for word in ("arrival", "prompts"))

    return sorted(
        f"{name}:{node.lineno}"
        for name, path in sources.items()
        if name not in ("workbench.traffic.arrivals", "workbench.traffic.sources")
        for node in ast.walk(ast.parse(path.read_text()))
        if compares(node)
    )


def test_only_the_traffic_registries_dispatch_on_arrival_and_source_names():
    """Issue 49 #4: a new traffic source meant new branches among 16 string comparisons."""
    assert traffic_name_comparisons(SOURCES) == []


def test_the_traffic_check_finds_a_planted_comparison(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('if scenario.traffic.arrival == "closed_loop":\n    pass\nif kind == "trace":\n    pass\n')
    assert traffic_name_comparisons({"planted": planted}) == ["planted:1"]


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
