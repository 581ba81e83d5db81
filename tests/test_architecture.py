"""The layout's promises: pure packages never import pytest or xdist."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

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
    `src` and `tests` strictly (only where untyped third-party modules are used is it relaxed)."""
    import tomllib
    from pathlib import Path

    package = Path(pytest_agenteval.__file__).parent
    assert (package / "py.typed").is_file()
    pyproject = tomllib.loads((package.parent.parent / "pyproject.toml").read_text())
    tool = pyproject["tool"]
    assert "py.typed" in tool["setuptools"]["package-data"]["pytest_agenteval"]
    assert tool["mypy"]["strict"] is True and tool["mypy"]["files"] == ["src", "tests"]
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
