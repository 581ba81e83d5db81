"""The layout's promises: pure packages never import pytest or xdist, and imports between
packages point one way."""

from __future__ import annotations

import ast
import graphlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest_agenteval

GLUE = ("pytest_agenteval.glue", "pytest_agenteval.plugin", "pytest_agenteval.hookspecs")


def pure_modules() -> list[str]:
    names = [
        info.name
        for info in pkgutil.walk_packages(pytest_agenteval.__path__, "pytest_agenteval.")
        if not info.name.startswith(GLUE)
    ]
    assert "pytest_agenteval.execution.attempt" in names
    return names


def test_pure_modules_import_without_pytest() -> None:
    """Everything but the pytest glue imports with pytest and xdist unavailable."""
    code = (
        "import sys\n"
        "sys.modules['pytest'] = sys.modules['_pytest'] = sys.modules['xdist'] = None\n"
        "import importlib\n"
        f"for name in {pure_modules()!r}:\n"
        "    importlib.import_module(name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_tests_conftest_loads_without_the_test_extra() -> None:
    """pytest loads tests/conftest.py for the README's example-suite command too, before the
    test extra is installed: it must not need jsonschema or hypothesis to import."""
    tests = __file__.rsplit("/", 1)[0]
    code = (
        "import sys\n"
        "sys.modules['jsonschema'] = sys.modules['hypothesis'] = None\n"
        f"sys.path.insert(0, {tests!r})\n"
        "import conftest\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_package_ships_its_types_and_is_checked_strictly() -> None:
    """`py.typed` is in the package and in the wheel's package data, and mypy checks all of
    `src`, `tests` and `bench` strictly (only where untyped third-party modules are used is it relaxed)."""
    import tomllib
    from pathlib import Path

    package = Path(pytest_agenteval.__file__).parent
    assert (package / "py.typed").is_file()
    pyproject = tomllib.loads((package.parent.parent / "pyproject.toml").read_text())
    tool = pyproject["tool"]
    assert "py.typed" in tool["setuptools"]["package-data"]["pytest_agenteval"]
    assert tool["mypy"]["strict"] is True and tool["mypy"]["files"] == ["src", "tests", "bench"]
    relaxed = [o["module"] for o in tool["mypy"]["overrides"]]
    assert relaxed == [
        "pytest_agenteval.reporting.reports",
        ["docutils", "docutils.*"],
        ["xdist", "xdist.*"],
        ["jsonschema", "jsonschema.*"],
    ]


def test_one_place_decides_each_attempt() -> None:
    """Only `Runtime.decide` asks the plan what to do with an attempt (reuse, regrade, run);
    the item, the recorder, the reporter and the xdist glue go through it."""
    from pathlib import Path

    package = Path(pytest_agenteval.__file__).parent
    callers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "plan.decide(" in path.read_text()
    )
    assert callers == ["glue/runtime.py"]


LAYERS = (
    ("core",),
    ("sources",),
    ("providers",),
    ("store",),
    ("execution",),
    ("reporting",),
    ("glue", "hookspecs"),
    ("plugin", "cli", "pytest_agenteval"),
)
"""Packages (and top-level modules) from the bottom up; each imports only from layers below
it. Of the middle layer the code needs: sources (task files) and providers (model clients)
below the store (the store's plan and stops are given task digests, not tasks), and the
store below execution (an attempt asks the plan and the stops); `pytest_agenteval` is the
package's own `__init__`, the public API, which nothing inside imports."""


def imports_between_packages(root: Path) -> dict[tuple[str, str], list[str]]:
    """Every import from one package of `root` (a package folder) into another, each with
    where it is written (`module:line`): at module level, under `TYPE_CHECKING` and inside
    functions alike. A lazy import inside a function is still a dependency: the layer it
    points at must be importable and correct for that code to run, so it counts."""
    name = root.name
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        is_init = parts[-1] == "__init__"
        module = (name, *parts[:-1]) if is_init else (name, *parts)
        here = _package(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _targets(node, module, is_init, name):
                there = _package(_module_of(root, target))
                if there != here:
                    found.setdefault((here, there), []).append(f"{'.'.join(module)}:{node.lineno}")
    return found


def _module_of(root: Path, target: tuple[str, ...]) -> tuple[str, ...]:
    """The module an import names: `from . import __version__` imports the package itself."""
    while len(target) > 1:
        path = root.joinpath(*target[1:])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            break
        target = target[:-1]
    return target


def _package(module: tuple[str, ...]) -> str:
    return module[1] if len(module) > 1 else module[0]


def _targets(
    node: ast.Import | ast.ImportFrom, module: tuple[str, ...], is_init: bool, name: str
) -> list[tuple[str, ...]]:
    if isinstance(node, ast.Import):
        return [tuple(a.name.split(".")) for a in node.names if a.name.split(".")[0] == name]
    if node.level == 0:
        base = tuple((node.module or "").split("."))
        return [base] if base[0] == name else []
    package = module if is_init else module[:-1]
    base = package[: len(package) - (node.level - 1)]
    if node.module:
        return [(*base, *node.module.split("."))]
    return [(*base, alias.name) for alias in node.names]  # a submodule, or a name of `base`


def against_the_order(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """The imports that do not point down the layers (or name a package no layer has)."""
    rank = {package: i for i, layer in enumerate(LAYERS) for package in layer}
    return [
        f"{here} -> {there} ({', '.join(where)})"
        for (here, there), where in sorted(edges.items())
        if rank.get(here, -1) <= rank.get(there, len(LAYERS))
    ]


def cycle_of(edges: dict[tuple[str, str], list[str]]) -> list[str]:
    """A cycle among packages (empty when there is none)."""
    graph: dict[str, set[str]] = {}
    for here, there in edges:
        graph.setdefault(here, set()).add(there)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_imports_between_packages_point_down_the_layers() -> None:
    """core -> sources -> providers -> store -> execution -> reporting -> glue -> plugin / cli:
    no package imports one at its own layer or above (TYPE_CHECKING and function-local
    imports included), so no two packages depend on each other."""
    edges = imports_between_packages(Path(pytest_agenteval.__file__).parent)
    assert ("glue", "execution") in edges and ("execution", "core") in edges
    assert cycle_of(edges) == []
    assert against_the_order(edges) == []
    assert {p for edge in edges for p in edge} <= {p for layer in LAYERS for p in layer}


def test_the_import_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The graph holds module-level, `TYPE_CHECKING`, function-local and `from . import`
    imports, so a cycle hidden in any of them fails the test above."""
    root = tmp_path / "pytest_agenteval"
    for package in ("core", "store", "execution"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "model.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..execution.x import y\n"
    )
    (root / "store" / "stops.py").write_text("def f():\n    from ..execution import limits\n")
    (root / "execution" / "limits.py").write_text("from ..store import stops\n")
    edges = imports_between_packages(root)
    assert set(edges) == {("core", "execution"), ("store", "execution"), ("execution", "store")}
    assert edges[("store", "execution")] == ["pytest_agenteval.store.stops:2"]
    assert sorted(set(cycle_of(edges))) == ["execution", "store"]
    assert [line.split(" (")[0] for line in against_the_order(edges)] == [
        "core -> execution",
        "store -> execution",
    ]


def test_what_users_implement_lives_in_core() -> None:
    """The Environment protocol and what it returns (ExecResult, ChangedFile) are core's, so a
    layer below execution can name them (`Task.environment`); the public names stay."""
    from pytest_agenteval import ChangedFile, Environment, ExecResult

    for public in (ChangedFile, Environment, ExecResult):
        assert public.__module__ == "pytest_agenteval.core.environment"


def test_every_docstring_is_valid_utf8() -> None:
    """No docstring holds a lone surrogate (a `\\udcff` escape written unescaped): Python
    3.13.0 cannot compile such a module, so the plugin would not import there."""
    import ast
    from pathlib import Path

    import pytest_agenteval

    for path in Path(pytest_agenteval.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc is not None:
                    doc.encode("utf-8")  # raises for a lone surrogate, naming it
