"""The floors of the package, drawn from its imports: every ``raylink`` import points to the same or
a lower floor, no two files import each other (directly or round a circle), and Ray is imported only
where the Ray side lives.

Every ``import raylink...`` / ``from raylink... import`` of every module under the package (not
``tests/``) is checked, function-local ones included: a function-local import is for an optional
or heavy dependency (the Spark connector, Ray in a CLI handler), never to hide an arrow that runs
back up or closes a circle. ``if TYPE_CHECKING:`` imports (annotations only) count as well: a
reader follows them as any other. ``FLOORS`` is the map:
change it only when the layout itself changes.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]  # the repository root is the package ``raylink``
PACKAGE = "raylink"

#: the floors, ground first; a module imports modules of its own floor or of lower ones only
FLOORS: List[Tuple[str, ...]] = [
    ("errors", "extras", "metrics"),  # leaves; metrics: PyFlink's pyflink.metrics interfaces
    ("core",),  # flink-core: options, configuration, functions, types, time, windows, state descriptors
    ("graph",),  # StreamGraph -> JobGraph -> ExecutionGraph
    ("shuffle",),  # the network stack
    ("state",),  # state backends, snapshots, checkpoint storage
    ("operators",),  # stream operators
    ("runtime",),  # task/, job/, client/, the local executor: no Ray
    ("actors",),  # the Ray side of each role
    ("connectors",),  # one folder per connector: file/, spark/
    ("api",),  # the user's top floor (and PyFlink's module names, stand-ins in api/pyflink_compat)
    ("", "__main__", "setup", "cli", "loadtest", "bench", "migrate", "table", "examples", "scripts"),  # tools, setup.py
]
#: where ``import ray`` may appear (the CLI, benchmarks and the load test reach Ray through actors/)
RAY_ALLOWED = ("actors", "connectors.spark")
#: not part of the package's code
SKIPPED_DIRS = {"tests", "deploy", "raylink.egg-info", "spark-warehouse", "__pycache__", "build"}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. "raylink.runtime.task.stream_task"
    target: str  # the imported module, e.g. "raylink.core.options"
    line: int
    local: bool  # inside a function
    type_checking: bool  # under ``if TYPE_CHECKING:``

    def describe(self) -> str:
        where = " (function-local)" if self.local else " (TYPE_CHECKING)" if self.type_checking else ""
        return f"{self.source} (line {self.line}) imports {self.target}{where}"


def module_files(root: Path = ROOT) -> Dict[str, Path]:
    """``{module name: file}`` of every module under the package but its tests."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in files:
            if not name.endswith(".py"):
                continue
            parts = list(Path(folder, name).relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([PACKAGE, *parts])] = Path(folder, name)
    return found


def _resolve(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The module ``name`` denotes (``raylink.core.options.ConfigOption`` -> ``raylink.core.options``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _flagged_nodes(tree: ast.AST) -> Tuple[set, set]:
    """The import nodes inside functions, and those under ``if TYPE_CHECKING:``."""
    local, type_checking = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_checking.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return local, type_checking


def imports_of(module: str, path: Path, modules: Dict[str, Path]) -> Iterator[Tuple[str, int, bool, bool]]:
    """``(imported name, line, function-local, TYPE_CHECKING)`` for every import in ``path``
    (relative imports resolved against ``module``)."""
    tree = ast.parse(path.read_text(), str(path))
    local, type_checking = _flagged_nodes(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from raylink.api import functions`` imports the module raylink.api.functions
            names = [f"{base}.{alias.name}" for alias in node.names] if base.startswith(PACKAGE) else [base]
        else:
            continue
        for name in names:
            yield name, node.lineno, id(node) in local, id(node) in type_checking


def raylink_imports(modules: Optional[Dict[str, Path]] = None) -> List[Import]:
    """Every import of a raylink module by a raylink module (a module importing itself left out)."""
    modules = module_files() if modules is None else modules
    found = []
    for module, path in modules.items():
        for name, line, local, type_checking in imports_of(module, path, modules):
            if name != PACKAGE and not name.startswith(PACKAGE + "."):
                continue
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.append(Import(module, target, line, local, type_checking))
    return list(dict.fromkeys(found))  # one per import statement and module


def floor_of(module: str) -> int:
    """The floor of a module: its first name under the package, looked up in ``FLOORS``."""
    first = module.split(".")[1] if "." in module else ""
    for level, names in enumerate(FLOORS):
        if first in names:
            return level
    raise AssertionError(f"{module}: its folder {first!r} is on no floor of FLOORS; add it where it belongs")


def upward_imports(imports: List[Import]) -> List[str]:
    """One line per import that points to a higher floor."""
    return [
        f"{i.describe()}: {i.source} is on floor {floor_of(i.source)} {FLOORS[floor_of(i.source)]}, "
        f"{i.target} on the higher floor {floor_of(i.target)} {FLOORS[floor_of(i.target)]}"
        for i in imports
        if floor_of(i.target) > floor_of(i.source)
    ]


def import_cycles(imports: List[Import]) -> List[List[str]]:
    """The import circles between files (strongly connected components of more than one module)."""
    graph: Dict[str, set] = defaultdict(set)
    for i in imports:
        graph[i.source].add(i.target)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: set = set()
    cycles: List[List[str]] = []
    counter = [0]

    def visit(root: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def ray_imports(modules: Optional[Dict[str, Path]] = None) -> List[str]:
    """One line per ``import ray`` (or ``from ray...``) outside the modules allowed to."""
    modules = module_files() if modules is None else modules
    found = []
    for module, path in modules.items():
        if module.startswith(tuple(f"{PACKAGE}.{name}" for name in RAY_ALLOWED)):
            continue
        for name, line, _local, _tc in imports_of(module, path, modules):
            if name == "ray" or name.startswith("ray."):
                found.append(f"{module} (line {line}) imports {name}")
    return found


@pytest.fixture(scope="module")
def imports() -> List[Import]:
    return raylink_imports()


def test_every_module_is_on_a_floor(imports):
    modules = module_files()
    assert len(modules) > 150 and len(imports) > 400  # the walk found the package
    for module in modules:
        floor_of(module)


def test_no_import_points_to_a_higher_floor(imports):
    upward = upward_imports(imports)
    assert not upward, "imports running back up:\n" + "\n".join(upward)


def test_no_module_below_the_api_imports_the_api(imports):
    api = floor_of("raylink.api")
    below = [i.describe() for i in imports if i.target.startswith("raylink.api") and floor_of(i.source) < api]
    assert not below, "\n".join(below)


def test_no_import_circle_between_files(imports):
    cycles = import_cycles(imports)
    described = []
    for cycle in cycles:
        members = set(cycle)
        edges = [i.describe() for i in imports if i.source in members and i.target in members]
        described.append(f"{len(cycle)} modules: " + ", ".join(cycle) + "\n    " + "\n    ".join(edges))
    assert not cycles, "import circles:\n" + "\n".join(described)


def test_ray_is_imported_only_by_the_ray_side():
    outside = ray_imports()
    assert not outside, f"Ray imported outside {RAY_ALLOWED}:\n" + "\n".join(outside)


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
    """The checks themselves: a package whose core imports its api, and two files importing each other."""
    for folder in ("core", "api", "graph"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "core" / "types.py").write_text("def f():\n    from raylink.api.env import Env\n")
    (tmp_path / "api" / "env.py").write_text("from raylink.core.types import f\n")
    (tmp_path / "graph" / "a.py").write_text("import raylink.graph.b\n")
    (tmp_path / "graph" / "b.py").write_text("from raylink.graph import a\n")
    found = raylink_imports(module_files(tmp_path))
    assert upward_imports(found) == [
        "raylink.core.types (line 2) imports raylink.api.env (function-local): raylink.core.types is on "
        "floor 1 ('core',), raylink.api.env on the higher floor 9 ('api',)"
    ]
    assert import_cycles(found) == [["raylink.api.env", "raylink.core.types"], ["raylink.graph.a", "raylink.graph.b"]]
