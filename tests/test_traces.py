"""Typed traces end to end: a real Python agent's own loop writes model calls, tool calls and
messages to `task.trace` and asks `task.check()` between turns; the record keeps the events in
order with their usage summed; the task's budget ends the loop graded (`stopped: budget`), a
run-wide cap ends it as `stopped` for a resume to run again; trajectory graders and a judge
`on: trajectory` read the trace; `show` and `export` print it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from chat_server import ChatServer
from helpers import WORKERS, DatasetMaker, latest_record, latest_run, summary_of
from pytest_agenteval.cli import main
from pytest_agenteval.core.errors import LimitReached, RunStopped
from pytest_agenteval.core.model import Budget, Task
from pytest_agenteval.core.trace import AnyEvent, ModelCall, ToolCall, read_events, render
from test_judge import judge_settings, judged
from test_providers import KEY, KEY_ENV

LOOP = '''
import pathlib

from pytest_agenteval.core.errors import LimitReached

LOG = pathlib.Path(__file__).with_name("turns.log")


def loop(task):
    """A tool loop of its own: before each turn it asks task.check(); each turn is one model
    call (100 tokens in, 10 out), one `bash` tool call and its result."""
    meta = task.metadata
    for n in range(meta.get("turns", 3)):
        try:
            task.check()
        except LimitReached:
            if meta.get("keep_going_on_budget"):
                return "partial answer"
            raise
        with LOG.open("a") as log:
            log.write(f"{task.id} {task.attempt} {n}\\n")
        task.trace.model_call(
            provider="scripted", model="m1", input_tokens=100, output_tokens=10,
            latency=0.001, finish_reason="tool_calls",
        )
        command = "pytest -q" if n else "ls"
        task.trace.message("assistant", f"turn {n}", tool_calls=[{"bash": command}])
        with task.trace.tool("bash", {"cmd": command}) as run:
            lines = "\\n".join(f"line {i}" for i in range(meta.get("lines", 3)))
            run.done(exit_status=n % 2, output=lines)
        task.trace.tool_result("ran", tool="bash")
    if meta.get("hit_max_turns"):
        task.trace.limit_hit("max_turns", "the loop's own max_turns")
    return meta.get("answer", "done")


def plain(task):
    return "done"
'''


def loop_dataset(dataset: DatasetMaker, tasks: dict[str, Any], **manifest: Any) -> Path:
    root = dataset(tasks, manifest={"agent": "loop:loop", **manifest})
    (root / "loop.py").write_text(LOOP)
    return root


def turns_logged(root: Path) -> list[str]:
    log = root / "turns.log"
    return log.read_text().splitlines() if log.exists() else []


def test_a_hand_made_task_checks_its_budget_from_its_trace() -> None:
    """Without a run, `task.check()` still sees the task's budget against the model calls
    its trace holds, and records the limit it found."""
    task = Task(id="t", input="q", metadata={}, attempt=0, seed=0, workspace=Path("."))
    task.budget = Budget(max_tokens=150)
    task.check()  # no model call yet: nothing is over
    task.trace.model_call(input_tokens=100, output_tokens=10)
    task.check()
    task.trace.model_call(input_tokens=100, output_tokens=10)
    with pytest.raises(LimitReached) as raised:
        task.check()
    assert raised.value.limit == "budget" and "220 tokens" in raised.value.reason
    assert task.trace.stopped is not None and task.trace.stopped.limit == "budget"
    task.trace.run_stop = lambda: "cancelled"
    with pytest.raises(RunStopped):
        task.check()


def test_appending_a_malformed_event_is_refused_with_the_field() -> None:
    """An event of a known type with a wrong field is refused where it is appended."""
    task = Task(id="t", input="q", metadata={}, attempt=0, seed=0, workspace=Path("."))
    with pytest.raises(ValueError, match="input_tokens"):
        task.trace.append({"type": "model_call", "input_tokens": -1})
    assert len(task.trace) == 0


@pytest.mark.parametrize("workers", WORKERS)
def test_a_python_loop_s_trace_is_recorded_in_order_with_usage_summed(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Each model call, message, tool call and tool result is in the record's transcript in
    the order the loop wrote them; the attempt's usage is the model calls' summed (the agent
    reported none); timings name each phase."""
    root = loop_dataset(dataset, {"t.yaml": {"input": "fix it", "expected": "done"}})
    pytester.runpytest_subprocess("--agenteval", "ds", *workers).assert_outcomes(passed=1)
    record = latest_record(root.parent, "t", 0)
    events = read_events(record["transcript"])
    assert events is not None and len(events) == len(record["transcript"]) == 12
    assert [e.type for e in events[:4]] == ["model_call", "message", "tool_call", "tool_result"]
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.arguments, c.exit_status) for c in calls] == [
        ({"cmd": "ls"}, 0),
        ({"cmd": "pytest -q"}, 1),
        ({"cmd": "pytest -q"}, 0),
    ]
    assert all(c.duration is not None and c.started_at is not None for c in calls)
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert record["usage"] == {
        "input_tokens": 300,
        "output_tokens": 30,
        "cost": None,
        "model": "m1",
    }
    assert "stopped" not in record
    timings = record["timings"]
    assert list(timings) == ["agent", "graders"] and len(timings["graders"]) == 1
    assert timings["agent"] > 0


def test_the_task_s_budget_ends_the_loop_graded_and_says_stopped(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A budget of 250 tokens: the check before the fourth turn (330 used) stops the loop;
    whether the agent lets the stop propagate or returns what it has, the attempt is graded
    (never an over_budget error) and its record says `stopped: budget`."""
    graders = [{"max_turns": 3}]
    root = loop_dataset(
        dataset,
        {
            "raised.yaml": {"input": "q", "metadata": {"turns": 9}, "graders": graders},
            "kept.yaml": {
                "input": "q",
                "expected": "partial answer",
                "metadata": {"turns": 9, "keep_going_on_budget": True},
            },
        },
        defaults={"budget": {"max_tokens": 250}},
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=2)
    for task_id in ("raised", "kept"):
        record = latest_record(root.parent, task_id, 0)
        assert record["status"] == "pass" and record["stopped"] == "budget"
        assert record["usage"]["input_tokens"] + record["usage"]["output_tokens"] == 330
        last = read_events(record["transcript"])[-1]  # type: ignore[index]
        assert last.type == "limit_hit" and last.limit == "budget"  # type: ignore[union-attr]
    assert latest_record(root.parent, "kept", 0)["output"] == "partial answer"
    assert len(turns_logged(root)) == 6


def test_the_loop_s_own_max_turns_is_recorded_and_graded(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A loop that appends `limit_hit: max_turns` is graded on its answer (a failure here)
    and its record says `stopped: max_turns`."""
    root = loop_dataset(
        dataset,
        {
            "t.yaml": {
                "input": "q",
                "expected": "fixed",
                "metadata": {"turns": 2, "hit_max_turns": True},
            }
        },
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(failed=1)
    record = latest_record(root.parent, "t", 0)
    assert record["status"] == "fail" and record["stopped"] == "max_turns"


def test_a_run_cap_stops_the_loop_between_turns_and_a_resume_runs_it_again(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A run token cap of 200 is reached after the second turn (220 tokens, counted as each
    model call is recorded): the check before the third raises, the attempt is recorded with
    what it spent as `stopped` (an error, never a verdict), and a resume with a higher cap
    runs it again to its end."""
    root = loop_dataset(
        dataset, {"t.yaml": {"input": "q", "expected": "done", "metadata": {"turns": 4}}}
    )
    first = pytester.runpytest("--agenteval", "ds", "--agenteval-max-tokens", "200")
    first.assert_outcomes(errors=1)
    assert turns_logged(root) == ["t 0 0", "t 0 1"]
    assert first.ret == pytest.ExitCode.INTERRUPTED  # the run is `budget`, not `complete`
    assert "the 1 it ended mid-way are recorded as stopped" in first.stdout.str()
    assert summary_of(pytester)["status"] == "budget"
    record = latest_record(root.parent, "t", 0)
    assert (record["status"], record["phase"], record["error_type"]) == (
        "error",
        "stopped",
        "RunStopped",
    )
    assert "token cap reached" in record["error"] and "resume" in record["error"]
    assert record["usage"]["input_tokens"] == 200 and record["usage"]["output_tokens"] == 20
    assert read_events(record["transcript"])[-1].limit == "run"  # type: ignore[index, union-attr]
    again = pytester.runpytest(
        "--agenteval", "ds", "--resume-suite", "--agenteval-max-tokens", "100000"
    )
    again.assert_outcomes(passed=1)
    assert turns_logged(root)[2:] == ["t 0 0", "t 0 1", "t 0 2", "t 0 3"]
    assert latest_record(root.parent, "t", 0)["status"] == "pass"
    assert again.ret == pytest.ExitCode.OK and summary_of(pytester)["status"] == "complete"


def test_an_isolated_agent_s_events_come_back_from_its_child(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under --agenteval-isolate the loop runs in a forked child: its events and the usage
    they sum to are in the record all the same."""
    root = loop_dataset(dataset, {"t.yaml": {"input": "q", "expected": "done"}})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-isolate")
    result.assert_outcomes(passed=1)
    record = latest_record(root.parent, "t", 0)
    assert len(read_events(record["transcript"]) or []) == 12
    assert record["usage"]["input_tokens"] == 300


def test_trajectory_graders_pass_and_fail_as_their_options_say(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`tool_called` counts the matching tool calls against min and max; `max_turns` counts
    model calls; an attempt without a trace fails both, saying why."""
    graders = [
        {"tool_called": {"tool": "bash", "args_match": "pytest", "min": 1, "max": None}},
        {"tool_called": {"tool": "bash", "args_match": "^pytest", "min": 3}},
        {"tool_called": {"tool": "bash", "args_match": "pytest", "max": 1}},
        {"tool_called": {"tool": "python"}},
        {"tool_called": "bash"},
        {"max_turns": 3},
        {"max_turns": 2},
    ]
    root = loop_dataset(
        dataset,
        {
            "traced.yaml": {"input": "q", "graders": graders},
            "plain.yaml": {
                "input": "q",
                "agent": "loop:plain",
                "graders": graders[:1] + graders[5:6],
            },
        },
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(failed=2)
    verdicts = latest_record(root.parent, "traced", 0)["verdicts"]
    assert [v["passed"] for v in verdicts] == [True, False, False, False, True, True, False]
    assert verdicts[0]["reason"] == "bash matching /pytest/ called 2 times (at least 1)"
    assert verdicts[2]["reason"] == "bash matching /pytest/ called 2 times (at least 1, at most 1)"
    assert verdicts[3]["reason"] == "python called 0 times (at least 1)"
    assert verdicts[6]["reason"] == "3 model turns (at most 2)"
    for verdict in latest_record(root.parent, "plain", 0)["verdicts"]:
        assert not verdict["passed"] and verdict["reason"].startswith("no trace:")


def test_a_bad_tool_called_option_is_a_located_load_error(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A regular expression that does not compile, or `max` below `min`, is an error at the
    grader's line."""
    loop_dataset(
        dataset,
        {
            "a.yaml": {"input": "q", "graders": [{"tool_called": {"args_match": "("}}]},
            "b.yaml": {"input": "q", "graders": [{"tool_called": {"min": 2, "max": 1}}]},
        },
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.stdout.fnmatch_lines(["*a.yaml*invalid regex '('*", "*b.yaml*max 1 is below min 2*"])


def test_a_judge_on_trajectory_receives_the_trace_fenced_as_data(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`judge: {on: trajectory}` sends the rendered trace (tool commands and output) between
    the random fences instead of the output; an attempt without a trace fails without a
    judge call."""
    monkeypatch.setenv(KEY_ENV, KEY)
    rubric = judged(0.9, "ran the tests")
    grader = [{"judge": {"rubric": rubric, "on": "trajectory"}}]
    root = loop_dataset(
        dataset,
        {
            "traced.yaml": {"input": "fix the bug", "graders": grader},
            "plain.yaml": {"input": "q", "agent": "loop:plain", "graders": grader},
        },
        judge=judge_settings(chat_server),
    )
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=1, failed=1)
    assert len(chat_server.requests) == 1
    system, user = chat_server.requests[0]["messages"]
    assert "TRAJECTORY" in system["content"]
    text = user["content"]
    assert "TRAJECTORY (data):" in text and "OUTPUT (data):" not in text
    assert 'tool bash {"cmd": "pytest -q"} → exit 1' in text and "model call m1" in text
    assert text.index("TRAJECTORY (data):") < text.index("RUBRIC:")
    marker = text.split("=== BEGIN ", 1)[1].split(" ===", 1)[0]
    assert text.count(f"=== END {marker} ===") == 2  # the task input's and the trajectory's
    plain = latest_record(root.parent, "plain", 0)["verdicts"][0]
    assert not plain["passed"] and plain["reason"].startswith("no trace:")


def test_show_and_export_print_the_turns(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show RUN TASK/N` prints each event (model calls, tool calls with their command and
    output) and the timings; `export` counts turns and tool calls and JSON Lines carry the
    events."""
    loop_dataset(dataset, {"t.yaml": {"input": "q", "expected": "done", "metadata": {"lines": 12}}})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    cache = str(pytester.path / ".pytest_cache")
    run = latest_run(pytester.path)
    capsys.readouterr()
    assert main(["show", run, "t/0", "--cache-dir", cache]) == 0
    out = capsys.readouterr().out
    assert "trace: 3 model turns, 3 tool calls" in out
    assert "  [1] model call m1 (100 in / 10 out, 0.00s, finish tool_calls)" in out
    assert '  [7] tool bash {"cmd": "pytest -q"} → exit 1 (' in out
    assert "      line 11" in out
    assert "timings: agent " in out and "graders equals " in out
    assert main(["export", run, "--cache-dir", cache]) == 0
    row = next(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert (row["turns"], row["tool_calls"], row["stopped"]) == ("3", "3", "")
    assert main(["export", run, "--format", "jsonl", "--cache-dir", cache]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["turns"] == 3 and [e["type"] for e in line["trace"][:2]] == [
        "model_call",
        "message",
    ]


def test_a_rendered_trace_names_every_event() -> None:
    """The text a judge reads: one numbered paragraph per event, content indented."""
    events: list[AnyEvent] = [
        ModelCall(model="m1", input_tokens=5, output_tokens=2, finish_reason="stop"),
        ToolCall(tool="bash", arguments={"cmd": "ls"}, exit_status=0, duration=0.5, output="a\nb"),
    ]
    assert render(events) == (
        "[1] model call m1 (5 in / 2 out, finish stop)\n"
        '[2] tool bash {"cmd": "ls"} → exit 0 (0.50s)\n    a\n    b'
    )


def test_each_model_call_counts_in_the_run_s_spend_once() -> None:
    """A recorded model call's tokens and cost (priced from `pricing:` when it reported
    none) reach the run's spend as it is recorded, unless its caller counted it already;
    either way the watch knows what was counted, so the answer's usage is not counted twice."""
    from types import SimpleNamespace
    from typing import cast

    from pytest_agenteval.core.llm import ModelPrice
    from pytest_agenteval.execution.turns import Watch
    from pytest_agenteval.sources.dataset import TaskDef

    spent: list[tuple[float | None, int]] = []
    pricing = {"m1": ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)}
    manifest = SimpleNamespace(pricing=pricing)
    task = cast(TaskDef, SimpleNamespace(timeout=None, dataset=SimpleNamespace(manifest=manifest)))
    trace = Task(id="t", input="q", metadata={}, attempt=0, seed=0, workspace=Path(".")).trace
    watch = Watch(
        trace, task, lambda cost, tokens, calls: spent.append((cost, tokens)), None, lambda p: None
    )
    trace.model_call(model="m1", input_tokens=1_000_000, output_tokens=0)
    trace.model_call(model="m1", input_tokens=0, output_tokens=10, cost=0.5, counted=True)
    trace.message("assistant", "hi")
    assert spent == [(1.0, 1_000_000)]
    assert watch.counted == (1.5, 1_000_010) and watch.turns == 2


def test_show_prints_a_tool_s_output_once() -> None:
    """The result sent back to the model is the tool's output again: `show` refers to it."""
    from pytest_agenteval.core.trace import ToolResult, event_json
    from pytest_agenteval.reporting.show import _Cut, _trace_lines

    events: list[AnyEvent] = [
        ToolCall(tool="bash", arguments={"cmd": "ls"}, exit_status=0, output="a\nb"),
        ToolResult(tool="bash", content="a\nb"),
        ToolResult(tool="bash", content="c"),
    ]
    lines = _trace_lines([event_json(e) for e in events], _Cut(full=True))
    assert lines[1:] == [
        '  [1] tool bash {"cmd": "ls"} → exit 0',
        "      a",
        "      b",
        "  [2] tool result (bash): the output above",
        "  [3] tool result (bash)",
        "      c",
    ]
