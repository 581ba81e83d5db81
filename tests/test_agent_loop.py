"""The `react` agent end to end: examples/agent_loop against its scripted model server on
127.0.0.1 (read the file, write the fix, run the tests, submit), locally, in Docker, with
attempts in flight and under xdist; max_turns and a run cost cap between turns; the Anthropic
wire format; tools from a conftest hook and from a Python function; bad options located."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model_server import ModelServer
from pytest_agenteval.core.trace import ModelCall, ToolCall, read_events
from pytest_agenteval.store.runs import Store

EXAMPLE = Path(__file__).parent.parent / "examples" / "agent_loop"


def _server_module() -> Any:
    spec = importlib.util.spec_from_file_location("agent_loop_server", EXAMPLE / "server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def scripted() -> Iterator[Any]:
    """The example's own scripted model, on a free port."""
    httpd = _server_module().serve(0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def example(pytester: pytest.Pytester, scripted: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of examples/agent_loop talking to the scripted server (local tasks only)."""
    root = pytester.path / "agent_loop"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("busybox", "__pycache__"))
    manifest = root / "agenteval.yaml"
    port = scripted.server_address[1]
    manifest.write_text(manifest.read_text().replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
    (root / "fix_docker.yaml").unlink()
    monkeypatch.setenv("LOCAL_MODEL_KEY", "local")
    return root


def records(root: Path) -> list[dict[str, Any]]:
    """Every committed record of the newest run below `root`, as stored JSON."""
    store = Store(root / ".pytest_cache/agenteval")
    try:
        newest = max(store.runs_dir.glob("*/run.json"), key=lambda p: p.stat().st_mtime)
        rows, _ = store.index(newest.parent.name)
        found = [store.record(newest.parent.name, row.key) for row in rows]
    finally:
        store.close()
    return sorted((r.to_json() for r in found if r is not None), key=lambda r: r["task_id"])


def _copies(root: Path, n: int) -> None:
    task = (root / "fix.yaml").read_text()
    for i in range(1, n):
        (root / f"fix_{i}.yaml").write_text(task)


def _assert_repaired(record: dict[str, Any]) -> None:
    events = read_events(record["transcript"]) or []
    steps = [
        e.tool if isinstance(e, ToolCall) else "model"
        for e in events
        if isinstance(e, ModelCall | ToolCall)
    ]
    assert steps == [
        "model",
        "read_file",
        "model",
        "write_file",
        "model",
        "bash",
        "model",
        "submit",
    ]
    bash = next(e for e in events if isinstance(e, ToolCall) and e.tool == "bash")
    assert bash.exit_status == 0 and "ok: add 2 3 = 5" in (bash.output or "")
    assert record["usage"]["input_tokens"] == 400 and record["usage"]["output_tokens"] == 80
    assert record["output"] == "fixed add.sh: tests pass"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="alone"),
        pytest.param(["--agenteval-concurrency", "8"], id="concurrency-8", marks=pytest.mark.slow),
        pytest.param(["-n", "2"], id="xdist", marks=pytest.mark.slow),
    ],
)
def test_the_example_repairs_its_repository(
    pytester: pytest.Pytester, example: Path, scripted: Any, args: list[str]
) -> None:
    """The scripted session makes each task pass; each record's trace has every model and
    tool call in order, with the calls' usage summed into the attempt's."""
    n = 1 if not args else 8
    _copies(example, n)
    result = pytester.runpytest_subprocess("--agenteval", "agent_loop", "-p", "no:randomly", *args)
    result.assert_outcomes(passed=n)
    found = records(pytester.path)
    assert len(found) == n and len(scripted.requests) == 4 * n
    for record in found:
        _assert_repaired(record)
    tools = [t["function"]["name"] for t in scripted.requests[0]["tools"]]
    assert tools == ["bash", "read_file", "write_file", "submit"]


def test_max_turns_two_is_graded_and_says_so(pytester: pytest.Pytester, example: Path) -> None:
    """With max_turns: 2 the loop ends after the fix is written: graded (a failure, the
    agent never submitted), the record says `stopped: max_turns`."""
    manifest = example / "agenteval.yaml"
    manifest.write_text(manifest.read_text().replace("max_turns: 10", "max_turns: 2"))
    pytester.runpytest("--agenteval", "agent_loop").assert_outcomes(failed=1)
    (record,) = records(pytester.path)
    assert (record["status"], record["stopped"]) == ("fail", "max_turns")
    assert [g["passed"] for g in record["verdicts"]] == [True, False]


def test_a_cost_cap_stops_after_the_second_turn_and_a_resume_runs_it_again(
    pytester: pytest.Pytester, example: Path, scripted: Any
) -> None:
    """Each turn costs $0.002: a $0.003 cap is passed by the second, so the server sees no
    third request; the record keeps the spend as `stopped` and the run ends `budget`, exit 2;
    a higher cap runs it again."""
    first = pytester.runpytest("--agenteval", "agent_loop", "--agenteval-max-cost", "0.003")
    first.assert_outcomes(errors=1)
    assert first.ret == pytest.ExitCode.INTERRUPTED  # the run is `budget`, said in its line
    first.stdout.fnmatch_lines(["agenteval: stopped (spend cap reached*mid-way*"])
    assert len(scripted.requests) == 2
    (record,) = records(pytester.path)
    assert (record["status"], record["phase"]) == ("error", "stopped")
    assert record["usage"]["cost"] == pytest.approx(0.004)
    again = pytester.runpytest(
        "--agenteval", "agent_loop", "--resume-suite", "--agenteval-max-cost", "1"
    )
    again.assert_outcomes(passed=1)
    assert len(scripted.requests) == 6
    _assert_repaired(records(pytester.path)[0])


@pytest.mark.slow
def test_the_example_repairs_its_repository_in_docker(
    pytester: pytest.Pytester, scripted: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the busybox sandbox the agent's bash and files are the container's; the command
    grader runs the tests there."""
    busybox = shutil.which("busybox")
    if busybox is None or shutil.which("docker") is None:
        pytest.skip("needs docker and busybox-static")
    root = pytester.path / "agent_loop"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("busybox", "__pycache__"))
    shutil.copy(busybox, root / "image" / "busybox")
    manifest = root / "agenteval.yaml"
    port = scripted.server_address[1]
    manifest.write_text(manifest.read_text().replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
    (root / "fix.yaml").unlink()
    monkeypatch.setenv("LOCAL_MODEL_KEY", "local")
    result = pytester.runpytest_subprocess("--agenteval", "agent_loop")
    result.assert_outcomes(passed=1)
    (record,) = records(pytester.path)
    _assert_repaired(record)


TOOLS_CONFTEST = '''
def pytest_agenteval_make_tool(name, dataset_root):
    if name == "shout":
        def shout(text: str) -> str:
            """Say it loudly.

            text: what to say
            """
            return text.upper() + "!"
        return shout
    return None
'''

TOOLS_MODULE = '''
def count(task, word: str) -> int:
    """How often a word is in the task's input."""
    return task.input.split().count(word)
'''


def _manifest(server: ModelServer, kind: str, tools: list[str], **react: Any) -> dict[str, Any]:
    base = server.base_url if kind == "openai" else server.root
    return {
        "name": "ds",
        "version": "1",
        "providers": {"m": {kind: {"base_url": base, "api_key_env": "LOCAL_MODEL_KEY"}}},
        "agent": {"react": {"model": "m1", "tools": tools, **react}},
    }


def _dataset(pytester: pytest.Pytester, manifest: dict[str, Any], **files: str) -> Path:
    root = pytester.path / "ds"
    root.mkdir()
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    task = {"input": "say hi hi", "expected": "HI!"}
    (root / "t.yaml").write_text(json.dumps(task))
    for name, text in files.items():
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_tools_from_a_conftest_and_a_module_in_both_wire_formats(
    pytester: pytest.Pytester,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """A conftest's tool (pytest_agenteval_make_tool) and a `module:function` tool are offered
    with schemas from their signatures and called; the answer is submit's, in OpenAI's and
    Anthropic's tool-call formats."""
    monkeypatch.setenv("LOCAL_MODEL_KEY", "local")
    manifest = _manifest(model_server, kind, ["shout", "tools.py:count", "submit"])
    _dataset(pytester, manifest, **{"conftest.py": TOOLS_CONFTEST, "tools.py": TOOLS_MODULE})
    model_server.reset(
        replies=[
            {"tool_calls": [{"name": "count", "arguments": {"word": "hi"}}]},
            {"tool_calls": [{"name": "shout", "arguments": {"text": "hi"}}]},
            {"tool_calls": [{"name": "submit", "arguments": {"answer": "HI!"}}]},
        ]
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    first, _, last = model_server.requests
    if kind == "openai":
        offered = {t["function"]["name"]: t["function"]["parameters"] for t in first["tools"]}
        results = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    else:
        offered = {t["name"]: t["input_schema"] for t in first["tools"]}
        results = [
            b["content"]
            for m in last["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
    assert offered["shout"]["properties"] == {
        "text": {"type": "string", "description": "what to say"}
    }
    assert offered["count"]["properties"] == {"word": {"type": "string"}}
    assert results == ["2", "HI!"]


def test_anthropic_gets_no_empty_turn_and_is_told_a_tool_failed(
    pytester: pytest.Pytester, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the Anthropic wire a reply with neither text nor tool calls is no empty assistant
    turn of the next request (the real API refuses one, as the test server does), and a tool
    that failed goes back as a `tool_result` with `is_error: true`."""
    monkeypatch.setenv("LOCAL_MODEL_KEY", "local")
    _dataset(pytester, _manifest(model_server, "anthropic", ["read_file", "submit"]))
    model_server.reset(
        replies=[
            {"text": ""},
            {"text": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "nope"}}]},
            {"text": "", "tool_calls": [{"name": "submit", "arguments": {"answer": "HI!"}}]},
        ]
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    bodies = model_server.requests
    assert len(bodies) == 3
    for body in bodies:
        assert all(m["content"] for m in body["messages"])
        assert [m["role"] for m in body["messages"]][-1] == "user"
    results = [
        block
        for m in bodies[2]["messages"]
        if isinstance(m["content"], list)
        for block in m["content"]
        if block["type"] == "tool_result"
    ]
    assert len(results) == 1 and results[0]["is_error"] is True
    assert "cannot read" in results[0]["content"]


def test_an_unknown_tool_is_a_located_error(
    pytester: pytest.Pytester, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool nobody provides is reported once, at the agent's spec, with a did-you-mean; no
    request is sent and no plugin traceback is shown."""
    monkeypatch.setenv("LOCAL_MODEL_KEY", "local")
    _dataset(pytester, _manifest(model_server, "openai", ["bash", "sumbit"]))
    result = pytester.runpytest("--agenteval", "ds")
    out = result.stdout.str() + result.stderr.str()
    assert "unknown tool 'sumbit'" in out and "submit" in out
    assert "Traceback" not in out and not model_server.requests
    assert sys.executable


def test_two_models_as_variants(
    pytester: pytest.Pytester, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two react specs differing in their model are two variants of one run: each variant's
    attempt asks its own model and both are summarised."""
    monkeypatch.setenv("LOCAL_MODEL_KEY", "local")
    manifest = _manifest(model_server, "openai", ["submit"])
    react = manifest.pop("agent")["react"]
    manifest["variants"] = {
        "small": {"react": {**react, "model": "small"}},
        "large": {"react": {**react, "model": "large"}},
    }
    root = _dataset(pytester, manifest)
    task = {"input": 'answer <<call submit {"answer": "HI!"}>>', "expected": "HI!"}
    (root / "t.yaml").write_text(json.dumps(task))
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=2)
    assert sorted(r["model"] for r in model_server.requests) == ["large", "small"]
    summary = json.loads(next(pytester.path.rglob("summary.json")).read_text())
    assert sorted(summary["variants"]) == ["large", "small"]
