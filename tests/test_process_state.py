"""What a session leaves in its process: nothing a later session in the same process (pytest
run again from code, an IDE's runner) would see."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

import pytest_agenteval
from pytest_agenteval import plugin

TWO_SESSIONS = """
import json, sys
import pytest
from pytest_agenteval.core import importing

seen = []
for folder in ("first", "second", "first"):
    before = list(sys.path)
    code = pytest.main(["--agenteval", folder, "-q", "-p", "no:randomly"])
    seen.append({
        "code": int(code),
        "path_kept": sys.path == before,
        "cached": len(importing._cache),
        "module": sys.modules.get("tools.bot") is not None,
    })
print("SEEN", json.dumps(seen))
"""


def test_two_sessions_in_one_process_each_get_their_own_agent(pytester: pytest.Pytester) -> None:
    """Sessions run one after another in one process, over datasets whose agent modules share
    a name (`tools.bot`), each call their own dataset's agent: the first session's module,
    sys.path entry and resolved reference are gone when the next begins."""
    for folder, answer in (("first", "one"), ("second", "two")):
        root = pytester.path / folder
        (root / "tools").mkdir(parents=True)
        (root / "tools" / "__init__.py").write_text("")
        (root / "tools" / "bot.py").write_text(f"def answer(task):\n    return {answer!r}\n")
        manifest = {"name": folder, "version": "1", "agent": "tools.bot:answer"}
        (root / "agenteval.yaml").write_text(json.dumps(manifest))
        (root / "t.yaml").write_text(json.dumps({"input": "q", "expected": answer}))
    script = pytester.makepyfile(sessions=TWO_SESSIONS)
    result = pytester.runpython(script)
    (line,) = [line for line in result.outlines if line.startswith("SEEN ")]
    seen = json.loads(line.removeprefix("SEEN "))
    assert [s["code"] for s in seen] == [0, 0, 0], result.stdout.str()
    assert all(s["path_kept"] and s["cached"] == 0 and not s["module"] for s in seen)


PURE = {
    "pytest_agenteval.core.docstrings": "field docstrings of our own classes (their source)",
    "pytest_agenteval.core.records": "JUnit property tuples, interned (name, value) pairs",
    "pytest_agenteval.execution.graders": "built-in graders' options and JSON Schema validators, "
    "pure functions of the options' and the schema's text",
    "pytest_agenteval.execution.process": "the programs this process runs now (each leaves it)",
    "pytest_agenteval.providers.http": "providers' URLs parsed, a pure function of their text",
    "pytest_agenteval.providers.client": "keys to mask in what a provider says: masking an "
    "earlier session's key too is only safer",
    "pytest_agenteval.reporting.metrics": "t quantiles, a pure function of numbers",
    "pytest_agenteval.store.locks": "the descriptors of locks this process holds now",
    "pytest_agenteval.core.pids": "this process's pid and start time, the same for every session",
    "pytest_agenteval.glue.collect": "once per process: the atexit freeze",
}
"""Module-level caches that hold nothing of a session: what they hold is the same for every
session (or is the process's own, released as it goes)."""


def module_caches(path: Path) -> list[str]:
    """A module's caches: module-level dicts, lists and sets made empty to be filled, and
    functions memoized with `functools.cache` / `lru_cache`."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any(d.split("(")[0].endswith(("cache", "lru_cache")) for d in decorators):
                found.append(node.name)
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        value = node.value
        empty = isinstance(value, ast.Dict | ast.List | ast.Set) and not (
            value.keys if isinstance(value, ast.Dict) else value.elts
        )
        made = isinstance(value, ast.Call) and not value.args and not value.keywords
        if empty or (made and ast.unparse(value).removesuffix("()") in ("dict", "set", "list")):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            found.append(ast.unparse(target))
    return found


def test_every_module_cache_has_its_reset_and_the_plugin_calls_it() -> None:
    """Each module that keeps a cache at module level defines `forget()` and is one of those
    the plugin's end-of-session cleanup calls (or holds nothing of a session, said why)."""
    package = Path(pytest_agenteval.__file__).parent
    caching = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in PURE and module_caches(path):
            caching[name] = module_caches(path)
    assert "pytest_agenteval.core.importing" in caching
    assert sorted(caching) == sorted(plugin.CACHES), caching
    for name in plugin.CACHES:
        module = __import__(name, fromlist=["forget"])
        assert callable(module.forget), name
        module.forget()


def test_the_plugin_forgets_at_the_sessions_end(pytester: pytest.Pytester) -> None:
    """An in-process session leaves no resolved reference and no sys.path entry behind."""
    from pytest_agenteval.core import importing
    from pytest_agenteval.glue import pluginhooks

    root = pytester.path / "ds"
    root.mkdir()
    (root / "agenteval.yaml").write_text('{"name": "ds", "version": "1", "agent": "bot:run"}')
    (root / "bot.py").write_text("def run(task):\n    return 'ok'\n")
    (root / "t.yaml").write_text('{"input": "q", "expected": "ok"}')
    pytester.runpytest_inprocess("--agenteval", "ds").assert_outcomes(passed=1)
    assert importing._cache == {} and importing._added == []
    assert pluginhooks.resolved_folder.cache_info().currsize == 0
    assert str(root) not in sys.path
