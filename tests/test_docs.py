"""The README stays a user guide and the docs stay reachable: the README starts with the two
commands and is at most 300 lines, every relative link in it and in docs/ points at a file that
exists, every `python -m MODULE` they name resolves (peers' modules, which live in their own
venvs, excepted), and every file path named in the docs or in the code's comments exists."""

from __future__ import annotations

import glob
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PEER_MODULES = ("vllm.", "sglang.")  # run with the peers' own interpreters (make test-vllm, make peers)


def test_the_readme_is_a_guide_that_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    first_block = text.split("```")[1]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make run", "make test"]


def test_every_relative_link_points_at_a_file():
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in PAGES
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert broken == []
    linked = {target for target in re.findall(r"\]\((docs/[^)#\s]+)", (ROOT / "README.md").read_text())}
    assert linked == {f"docs/{page.name}" for page in PAGES[1:]}  # every page reachable from the README


def test_every_module_the_docs_run_exists():
    missing = [
        f"{page.relative_to(ROOT)}: python -m {module}"
        for page in PAGES
        for module in re.findall(r"python -m ([A-Za-z_][\w.]*[\w])", page.read_text())
        if not module.startswith(PEER_MODULES) and importlib.util.find_spec(module) is None
    ]
    assert missing == []


def test_the_knob_table_is_made_from_the_fields_help():
    from engine.configuration.knob_table import knobs_markdown

    assert (ROOT / "docs" / "knobs.md").read_text() == knobs_markdown(), (
        "run: python -m engine.configuration.knob_table > docs/knobs.md"
    )


# A path into the project (globs allowed: engine/loading/*.py), not part of a longer path or URL.
_PROJECT_PATH = re.compile(
    r"(?<![\w./-])((?:engine|workbench|kernels|benchmarks|tests|scripts|presets|docs|assets)/[\w*./-]*\w"
    r"\.(?:py|toml|md|sh|png|csv|jsonl|json))"
)
OTHER_PROJECTS = {"ggml's docs/gguf.md"}  # paths in other projects' repositories, named as theirs


def test_every_project_path_named_in_docs_and_code_exists():
    """Issue 49 #6: stale references (a cited test renamed, the old loader paths after the loaders
    moved) sent readers nowhere. Paths are read from the project root, or, in tests/, from the
    file's own folder."""
    sources = [*PAGES] + [
        path
        for folder in ("engine", "workbench", "kernels", "benchmarks", "scripts", "tests")
        for path in (ROOT / folder).rglob("*.py")
    ]
    missing = []
    for source in sources:
        text = source.read_text()
        for match in _PROJECT_PATH.finditer(text):
            named = match.group(1)
            if any(text[max(0, match.start() - len(other)) : match.end()].endswith(other) for other in OTHER_PROJECTS):
                continue
            if not (glob.glob(str(ROOT / named)) or glob.glob(str(source.parent / named))):
                missing.append(f"{source.relative_to(ROOT)}: {named}")
    assert missing == []
