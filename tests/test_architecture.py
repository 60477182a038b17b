"""The layering docs/architecture.md describes, checked on the source: no import circle among the
modules of vpo/ and vpo_tasks/, the engine's task-independent modules import no task and not the
CPU trainer, and no module outgrows a read-through (400 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("vpo", "vpo_tasks")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, top_level_only: bool) -> set[str]:
    """Project modules imported by a file (`from a.b import c` counts a.b and a.b.c if it is a module)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    known = modules()
    return {name for name in names if name in known and name.split(".")[0] in PACKAGES}


def test_no_import_circle():
    """Imports inside functions count too: a lazy import hides a cycle from Python, not from a reader."""
    graph = {name: imports(path, top_level_only=False) for name, path in modules().items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if nxt == node or nxt.startswith(node + "."):
                continue  # a package importing its own submodule is not a circle
            assert state.get(nxt) != 1, f"import circle: {' -> '.join(trail + [node, nxt])}"
            if nxt not in state:
                visit(nxt, trail + [node])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_engine_modules_import_no_task_and_not_the_cpu_trainer():
    known = modules()
    for name in ("vpo.task", "vpo.evaluate", "vpo.generate", "vpo.reward", "vpo.prompts", "vpo.advantage",
                 "vpo.metrics", "vpo.data"):
        bad = {m for m in imports(known[name], top_level_only=False) if m.startswith(("vpo_tasks", "vpo.local"))}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_no_python_file_over_400_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long
