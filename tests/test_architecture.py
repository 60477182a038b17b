"""The layering docs/architecture.md describes, checked on the source: no import circle among the
modules of vpo/ and vpo_tasks/, the engine's task-independent modules and the settings layer import no
task and not the CPU trainer, no module outgrows a read-through (400 lines) and no function a screen
and a half (80 lines)."""

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
    for name in (
        "vpo.task",
        "vpo.evaluate",
        "vpo.generate",
        "vpo.reward",
        "vpo.prompts",
        "vpo.advantage",
        "vpo.method_advantage",
        "vpo.metrics",
        "vpo.data",
        "vpo.settings",
        "vpo.config",
        "vpo.config_checks",
        "vpo.overrides",
    ):
        bad = {m for m in imports(known[name], top_level_only=False) if m.startswith(("vpo_tasks", "vpo.local"))}
        assert not bad, f"{name} imports {sorted(bad)}"


def test_no_function_over_80_lines():
    """A function reads top to bottom as named steps (the trainer's loop, veRL's command) when it fits
    in about a screen and a half; nested functions count with the one that holds them."""
    long = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                long[f"{name}.{node.name}"] = node.end_lineno - node.lineno + 1
    assert not long, long


def test_no_python_file_over_400_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long


def test_documents_cited_are_in_the_repository():
    """Code, rules, tests and docs cite documents the repository holds (or the authors' public files
    by their URL or repository path), never notes kept elsewhere."""
    import re
    import subprocess

    notes = re.compile(
        r"(?<![\w/.-])([\w./-]*\b(?:tasks|DESIGN|verl|verl-cpu|paper|snakemake|style-anchors)\.md)\b"
        r"|\bDESIGN section\b"
    )
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    bad = []
    for name in files:
        path = REPO / name
        if (
            path.suffix not in {".py", ".md", ".smk", ".yaml", ".yml", ".json", ".rst", ".toml", ".txt", ""}
            or not path.is_file()
            or "fixtures" in path.parts
            and path.suffix not in {".json", ".md"}
        ):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for match in notes.finditer(line):
                cited = match.group(1)
                if cited is None or not ((REPO / cited).is_file() or (path.parent / cited).is_file()):
                    bad.append(f"{name}:{number}: {match.group(0)}")
    assert not bad, "documents cited but not in the repository:\n" + "\n".join(bad)


def test_the_architecture_doc_lists_what_each_module_imports():
    """docs/architecture.md's module tables: for every `name.py` row, the project modules it names are
    the ones the file imports (lazy imports included), so the map cannot drift from the code."""
    import re

    doc = (REPO / "docs" / "architecture.md").read_text()
    known = modules()
    checked = 0
    table = doc.split("### vpo/\n", 1)[1].strip().split("\n\n", 1)[0]
    for package in ("vpo",):
        for row in table.splitlines()[2:]:
            cells = [c.strip() for c in row.strip("|").split("|")]
            names = re.findall(r"`(\w+)\.py`", cells[0])
            if len(names) != 1:
                continue
            module = f"{package}.{names[0]}"
            listed = set() if cells[2] == "nothing" else {item.split(" (")[0] for item in cells[2].split(", ")}
            actual = {
                name.removeprefix("vpo.")
                for name in imports(known[module], top_level_only=False)
                if name != module and name != "vpo"
            }
            assert listed == actual, f"{module}: the doc lists {sorted(listed)}, the file imports {sorted(actual)}"
            checked += 1
    assert checked >= 30


def test_every_test_a_document_cites_exists():
    """docs/reliability.md keeps each promise with a named test: the names must be real tests."""
    import re

    cited = {
        (path, name)
        for doc in (REPO / "docs").glob("*.md")
        for path, name in re.findall(r"(tests/\w+\.py)::(\w+)", doc.read_text())
    }
    assert cited, "no test is cited"
    missing = [
        f"{path}::{name}"
        for path, name in sorted(cited)
        if not re.search(rf"^def {name}\(", (REPO / path).read_text(), re.M)
    ]
    assert not missing, f"cited tests that do not exist: {missing}"


BACKENDS = ("vpo.local", "vpo.trl_ext", "vpo.verl_ext")


def test_the_backends_sit_side_by_side():
    """No training backend imports another's package (function-level imports included): what two of them
    share lives in vpo/backend.py (docs/architecture.md)."""
    known = modules()
    for name, path in known.items():
        own = next((b for b in BACKENDS if name == b or name.startswith(b + ".")), None)
        if own is None:
            continue
        others = {m for m in imports(path, top_level_only=False) for b in BACKENDS if b != own and m.startswith(b)}
        assert not others, f"{name} (backend {own}) imports {sorted(others)}: move what they share to vpo/backend.py"


# ---- imports at the head of the file ---------------------------------------------------------------
# What a module may import inside a function: a package that costs seconds or a GPU stack, or a module of
# the project that loads one when imported (the cheap commands then stay cheap). `vpo train` imports the
# chosen backend by name (vpo.train.BACKENDS).
HEAVY_PACKAGES = {"torch", "transformers", "verl", "vllm", "trl", "openevolve", "ray", "datasets", "pandas", "pyarrow"}


def import_time_nodes(tree: ast.Module) -> list[ast.AST]:
    """The import statements that run when the module is imported: everywhere but inside functions and
    `if TYPE_CHECKING:` blocks."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        todo += list(ast.iter_child_nodes(node))
    return found


def imported_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # a relative import: the project's own
        return []
    return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]


def loads_heavy(name: str, known: dict[str, Path], memo: dict[str, bool]) -> bool:
    """Whether importing the module `name` (its packages' __init__ first) loads a heavy package."""
    if name in memo:
        return memo[name]
    memo[name] = False  # no circles (test_no_import_circle); this stops a walk on a bad day
    parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
    heavy = any(loads_heavy(p, known, memo) for p in parents if p in known)
    for node in import_time_nodes(ast.parse(known[name].read_text())):
        for imported in imported_names(node):
            if imported.split(".")[0] in HEAVY_PACKAGES or (imported in known and loads_heavy(imported, known, memo)):
                heavy = True
    memo[name] = heavy
    return heavy


def test_the_projects_own_modules_are_imported_at_the_head_of_the_file():
    """A function-level import of the project's own module guards nothing unless that module loads a heavy
    package the importer does not: such imports belong at the file's head, where a reader sees what the
    module depends on."""
    known, memo, lazy = modules(), {}, []
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        at_import = {id(node) for node in import_time_nodes(tree)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in at_import:
                continue
            own = [m for m in imported_names(node) if m in known]
            if not own:
                continue
            if not any(loads_heavy(m, known, memo) for m in own) or loads_heavy(name, known, memo):
                lazy.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not lazy, "imports of light project modules inside functions (move them to the head):\n" + "\n".join(lazy)


def test_the_heavy_import_check_sees_torch_behind_a_project_module():
    memo = {}
    known = modules()
    assert loads_heavy("vpo.tiny_llama", known, memo) and loads_heavy("vpo.local.model", known, memo)
    assert not loads_heavy("vpo.weights", known, memo) and not loads_heavy("vpo.cli", known, memo)
