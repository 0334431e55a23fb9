"""The test suite's own hygiene, read from its source (AST, no test runs): every test function
states an expectation that can fail.

A test function (``test_*`` at module level or in a ``Test*`` class) states an expectation when
its body (nested functions included) holds one of:

* an ``assert`` whose condition is not a constant or a non-empty tuple (``assert (x, "why")``
  is always true);
* ``pytest.raises`` / ``pytest.warns`` / ``pytest.deprecated_call`` / ``pytest.fail``;
* a call of an *expectation helper*: a function defined in ``tests/`` that states one itself
  (resolved by AST through the module's own functions, its classes' methods and the names it
  imports from ``raylink.tests.*``, to a fixed point), or one of :data:`LIBRARY_ASSERTIONS`.

Every ``assert`` anywhere in ``tests/`` is also checked for an always-true condition, and every
skip (``pytest.skip``, ``pytest.importorskip``, ``pytest.mark.skip``/``skipif``) must be one of
:data:`DECLARED_SKIPS`: a platform or environment condition that holds in CI (root, 2 CPUs,
the installed extras), so nothing is collected there only to be skipped.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

TESTS = Path(__file__).resolve().parent
PACKAGE = "raylink.tests"

#: calls on ``pytest`` that state an expectation
PYTEST_EXPECTATIONS = {"raises", "warns", "deprecated_call", "fail"}
#: assertion helpers of libraries (they raise when their comparison fails)
LIBRARY_ASSERTIONS = {
    "assert_frame_equal",
    "assert_series_equal",
    "assert_index_equal",
    "assert_array_equal",
    "assert_allclose",
    "assert_equal",
}


#: the kinds of skip in each file of tests/ that has one, with the condition that lets it run in CI (CI=true, root, 2 cores,
#: scripts/setup.sh's extras dev,spark,plots, the compiled module built: RAYLINK_REQUIRE_COMPILED)
DECLARED_SKIPS = {
    "tests/test_ray_runtime.py": ["skipif"],  # thread pinning: Linux with 2+ CPUs
    "tests/test_runtime_local_process.py": ["skipif"],  # thread pinning: Linux with 2+ CPUs
    "tests/test_rest_security.py": ["skipif"],  # a second local user: root
    "tests/test_runtime_dir_squatting.py": ["skipif"],  # another user's folders: root
    "tests/test_savepoint_targets.py": ["skipif"],  # another user's savepoint: root
    "tests/test_state_rocksdb.py": ["skipif"],  # another user's working folder: root
    "tests/test_shuffle_hotpath.py": ["skipif"],  # no compiled module, outside CI only
    "tests/test_core_row_twins.py": ["skipif"],  # no compiled Row, outside CI only (required in CI)
    "tests/test_shuffle_codec_collect.py": ["skipif"],  # no compiled module, outside CI only
    "tests/test_runtime_dashboard_browser.py": ["importorskip", "skipif"],  # no chromium/playwright, outside CI
    "tests/test_spark_extras.py": ["importorskip"],  # the spark extra
    "tests/test_spark_shared_session.py": ["importorskip"],  # the spark extra
}
SKIP_CALLS = {"skip", "importorskip", "skipif"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(TESTS).with_suffix("").parts
    return ".".join((PACKAGE, *parts)).removesuffix(".__init__")


def _always_true(test: ast.expr) -> bool:
    """A condition that holds whatever the code under test does: a truthy constant, a non-empty
    display (``assert (x, "why")``), ``... or <truthy constant>``, or a comparison of constants."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
        return len(getattr(test, "elts", getattr(test, "keys", []))) > 0
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_always_true(value) for value in test.values)
    if isinstance(test, ast.Compare):
        return all(isinstance(e, ast.Constant) for e in (test.left, *test.comparators)) and bool(
            eval(compile(ast.Expression(test), "<assert>", "eval"))  # constants only: nothing runs
        )
    return False


def _callee(call: ast.Call) -> tuple[Optional[str], Optional[str]]:
    """``(owner, name)`` of a call: ``f()`` -> (None, "f"), ``a.f()`` -> ("a", "f")."""
    func = call.func
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        return owner, func.attr
    return None, None


@dataclass
class Function:
    module: str
    qualname: str  # "f" or "Class.f"
    node: ast.AST
    path: Path
    direct: bool = False  # states an expectation without help
    calls: list = field(default_factory=list)  # (owner, name) of every call in its body


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    functions: dict = field(default_factory=dict)  # qualname -> Function
    imports: dict = field(default_factory=dict)  # local name -> (module, name)


def _read_body(node: ast.AST) -> tuple[bool, list]:
    """Whether a function's body states an expectation itself, and ``(owner, name)`` of its calls."""
    direct = False
    calls = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert) and not _always_true(sub.test):
            direct = True
        elif isinstance(sub, ast.Call):
            owner, name = _callee(sub)
            calls.append((owner, name))
            if (owner == "pytest" and name in PYTEST_EXPECTATIONS) or name in LIBRARY_ASSERTIONS:
                direct = True
    return direct, calls


def parse_module(name: str, path: Path, text: str) -> Module:
    """A module's functions (and methods), what each calls and the names it imports from tests/."""
    tree = ast.parse(text, filename=str(path))
    module = Module(name, path, tree)
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.module.startswith(PACKAGE):
            for alias in stmt.names:
                module.imports[alias.asname or alias.name] = (stmt.module, alias.name)
        functions = [(stmt.name, stmt)] if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
        if isinstance(stmt, ast.ClassDef):
            functions = [
                (f"{stmt.name}.{item.name}", item)
                for item in stmt.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
        for qualname, node in functions:
            direct, calls = _read_body(node)
            module.functions[qualname] = Function(name, qualname, node, path, direct, calls)
    return module


@functools.lru_cache(maxsize=1)
def _all_modules() -> dict[str, Module]:
    modules = {}
    for path in sorted(TESTS.rglob("*.py")):
        module = parse_module(_module_name(path), path, path.read_text(encoding="utf-8"))
        modules[module.name] = module
    return modules


def load_modules() -> dict[str, Module]:
    """Every module under tests/, by its import name (read once per test session)."""
    return dict(_all_modules())


def _resolve(modules: dict[str, Module], module: Module, qualname: str, owner, name) -> Optional[Function]:
    """The function of ``tests/`` a call in ``module.qualname`` reaches, if any (``obj.m()``:
    the one method ``m`` of this module's classes, when only one class has it)."""
    if owner in ("self", "cls") and "." in qualname:
        return module.functions.get(f"{qualname.split('.')[0]}.{name}")
    if owner is None:
        if name in module.functions:
            return module.functions[name]
        if name in module.imports:
            source, original = module.imports[name]
            target = modules.get(source)
            return target.functions.get(original) if target else None
        return None
    if owner in module.imports:  # from raylink.tests import runtime_jobs; runtime_jobs.helper()
        source, original = module.imports[owner]
        target = modules.get(f"{source}.{original}")
        return target.functions.get(name) if target else None
    if owner is not None:  # obj.method(): a method of that name of a class of this module
        methods = [f for q, f in module.functions.items() if "." in q and q.split(".", 1)[1] == name]
        return methods[0] if len(methods) == 1 else None
    return None


def expectation_helpers(modules: dict[str, Module]) -> set[tuple[str, str]]:
    """``(module, qualname)`` of every function of ``tests/`` that states an expectation,
    itself or through the helpers it calls (a fixed point)."""
    stating = {(f.module, f.qualname) for m in modules.values() for f in m.functions.values() if f.direct}
    changed = True
    while changed:
        changed = False
        for module in modules.values():
            for function in module.functions.values():
                key = (function.module, function.qualname)
                if key in stating:
                    continue
                for owner, name in function.calls:
                    target = _resolve(modules, module, function.qualname, owner, name)
                    if target is not None and (target.module, target.qualname) in stating:
                        stating.add(key)
                        changed = True
                        break
    return stating


def _is_test(module: Module, qualname: str) -> bool:
    if not module.path.name.startswith("test_"):
        return False
    *owner, name = qualname.split(".")
    return name.startswith("test") and (not owner or owner[0].startswith("Test"))


def unchecked_tests(modules: dict[str, Module]) -> list[str]:
    stating = expectation_helpers(modules)
    return sorted(
        f"{m.path.relative_to(TESTS.parent)}::{f.qualname}"
        for m in modules.values()
        for f in m.functions.values()
        if _is_test(m, f.qualname) and (f.module, f.qualname) not in stating
    )


def always_true_asserts(modules: dict[str, Module]) -> list[str]:
    return sorted(
        f"{m.path.relative_to(TESTS.parent)}:{node.lineno}"
        for m in modules.values()
        for node in ast.walk(m.tree)
        if isinstance(node, ast.Assert) and _always_true(node.test)
    )


def skips(modules: dict[str, Module]) -> dict[str, list[str]]:
    """``{file: [the kinds of skip in it, sorted]}`` (``pytest.skip(...)``,
    ``pytest.importorskip(...)``, ``pytest.mark.skip``/``skipif``)."""
    found: dict[str, list[str]] = {}
    for m in modules.values():
        for node in ast.walk(m.tree):
            kind = None
            if isinstance(node, ast.Call):
                owner, name = _callee(node)
                if owner == "pytest" and name in ("skip", "importorskip"):
                    kind = name
            if isinstance(node, ast.Attribute) and node.attr in ("skip", "skipif"):
                mark = node.value
                if isinstance(mark, ast.Attribute) and mark.attr == "mark":
                    kind = node.attr
            if kind:
                found.setdefault(str(m.path.relative_to(TESTS.parent)), []).append(kind)
    return {path: sorted(set(kinds)) for path, kinds in found.items()}


def test_every_skip_is_a_declared_platform_or_environment_condition():
    """A skip that is not declared here (with what makes it run in CI) fails: a parametrisation
    that never runs is not generated instead."""
    modules = {name: m for name, m in load_modules().items() if not name.endswith(".test_suite_hygiene")}
    undeclared = {
        path: [kind for kind in kinds if kind not in DECLARED_SKIPS.get(path, [])]
        for path, kinds in skips(modules).items()
    }
    assert {path: kinds for path, kinds in undeclared.items() if kinds} == {}


def test_every_test_function_states_an_expectation():
    modules = load_modules()
    assert sum(_is_test(m, q) for m in modules.values() for q in m.functions) > 500  # the suite was read
    assert unchecked_tests(modules) == []


def test_no_assert_is_always_true():
    assert always_true_asserts(load_modules()) == []


def test_the_checker_tells_a_test_without_expectation_from_one_with_helpers(tmp_path):
    source = """
from raylink.tests.runtime_jobs import wait_for

def check(x):
    assert x == 1

def check_twice(x):
    check(x)
    check(x)

def test_direct():
    assert 1 + 1 == 2

def test_through_two_helpers():
    check_twice(1)

def test_raises():
    import pytest
    with pytest.raises(ValueError):
        int("x")

def test_nothing():
    wait_for(lambda: True, None)

def test_tuple_assert():
    assert (1 == 2, "always true")

def test_constant_asserts():
    assert 1 < 2 and True or "x"
    assert 2 == 2

class TestGroup:
    def _helper(self):
        assert self.value == 2

    def test_method(self):
        self._helper()

    def test_method_without(self):
        print("no check")
"""
    module = parse_module(f"{PACKAGE}.test_example", TESTS / "test_example.py", source)
    modules = load_modules()
    modules[module.name] = module
    flagged = {name.split("::")[1] for name in unchecked_tests(modules) if "test_example" in name}
    assert flagged == {"test_nothing", "test_tuple_assert", "test_constant_asserts", "TestGroup.test_method_without"}
