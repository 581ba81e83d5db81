"""`agenteval show`, `export` and `diff` on stored runs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, latest_run, task
from pytest_agenteval.cli import main
from test_judge import CALL_COST, PRICES, judge_settings, judged
from test_providers import KEY, KEY_ENV
from variant_runs import write_variant_run

# Answers by attempt; usage and a transcript; a comma and a quote in the output for CSV.
AGENT = """
from pytest_agenteval import AgentResult, Usage

def run(task):
    answers = task.metadata["answers"]
    answer = answers[task.attempt % len(answers)]
    if answer == "boom":
        raise RuntimeError("the tool broke")
    return AgentResult(
        output=answer,
        usage=Usage(input_tokens=10 + task.attempt, output_tokens=5, cost=0.25),
        transcript=[{"role": "user", "content": "question"}, {"role": "assistant", "content": answer}],
    )
"""


@pytest.fixture
def run_dir(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A finished run of three tasks of two attempts, one with an id holding `/` and a digit."""
    root = dataset(
        {
            "math/add/2.yaml": task(expected="ok", metadata={"answers": ["ok", 'no, "never"']}),
            "solid.yaml": task(expected="ok", metadata={"answers": ["ok"]}, tags=["easy"]),
            "broken.yaml": task(expected="ok", metadata={"answers": ["boom"]}),
        },
        manifest={"agent": "rich_agent:run"},
    )
    (root / "rich_agent.py").write_text(AGENT)
    pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    monkeypatch.chdir(pytester.path)
    return latest_run(pytester.path)


def out_of(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what inner pytest runs printed
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_show_run_lists_tasks(run_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`show RUN` (also `latest`) lists every task with its pass / fail / error counts."""
    code, out, _ = out_of(capsys, "show", "latest")
    assert code == 0 and f"run {run_dir} (complete)" in out
    assert f"agenteval show {run_dir} TASK_ID" in out.splitlines()[-1]
    rows = {line.split()[-1]: line.split()[:3] for line in out.splitlines()[2:-1]}
    assert rows == {
        "broken": ["0/2", "0", "2"],
        "math/add/2": ["1/2", "1", "0"],
        "solid": ["2/2", "0", "0"],
    }


def test_show_task_lists_attempts(run_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`show RUN TASK_ID` (an id ending in `/2`) lists its attempts, not attempt 2 of `math/add`."""
    code, out, _ = out_of(capsys, "show", run_dir, "math/add/2")
    assert code == 0 and "task math/add/2: 1/2 attempts passed" in out
    assert "    0  pass" in out and "    1  fail" in out and "tokens 11 in / 5 out" in out
    assert out.splitlines()[-1] == f"one attempt in full: agenteval show {run_dir} math/add/2/N"


def test_show_attempt_in_full(run_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`show RUN TASK_ID/N` shows output, verdicts, transcript, usage, cost and duration;
    an errored attempt shows its error."""
    code, out, _ = out_of(capsys, "show", run_dir, "math/add/2/1")
    assert code == 0
    assert "task math/add/2 attempt 1 (ds): fail" in out
    assert 'output:\n  no, "never"' in out
    assert "graders:\n  FAIL equals" in out
    assert "transcript:\n  [user]\n    question\n  [assistant]" in out
    assert "tokens 11 in / 5 out · cost 0.2500" in out and "duration" in out
    code, out, _ = out_of(capsys, "show", run_dir, "broken/0")
    assert (
        code == 0
        and "error in agent (agent_error, RuntimeError):" in out
        and "the tool broke" in out
    )


def test_show_unknown_task_suggests(run_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown task id is one clear line with the close matches; a missing attempt too."""
    code, _, err = out_of(capsys, "show", run_dir, "solidd")
    assert code == 1 and "no task 'solidd' in this run; did you mean 'solid'? (run " in err
    code, _, err = out_of(capsys, "show", run_dir, "solid/7")
    assert code == 1 and "task 'solid' has no attempt 7; it has 0, 1" in err
    code, _, err = out_of(capsys, "show", "nope")
    assert code == 1 and "no run 'nope'" in err


def test_export_csv(run_dir: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """CSV: one row per attempt, quoting intact, numbers that parse as numbers, tags `;`-joined."""
    code, out, _ = out_of(capsys, "export", run_dir)
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 6
    row = next(r for r in rows if r["task"] == "solid" and r["attempt"] == "1")
    assert row["status"] == "pass" and row["tags"] == "easy" and row["reused"] == ""
    assert float(row["score"]) == 1.0 and int(row["input_tokens"]) == 11
    assert float(row["cost"]) == 0.25 and float(row["duration"]) >= 0
    target = tmp_path / "out.csv"
    assert main(["export", run_dir, "--out", str(target)]) == 0
    assert target.read_text() == out


def test_export_jsonl(run_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    """JSON Lines: typed numbers, tags as a list, a missing number null."""
    code, out, _ = out_of(capsys, "export", "latest", "--format", "jsonl")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 6
    solid = next(r for r in rows if r["task"] == "solid")
    assert solid["tags"] == ["easy"] and solid["cost"] == 0.25 and solid["output_tokens"] == 5
    broken = next(r for r in rows if r["task"] == "broken")
    assert broken["status"] == "error" and broken["input_tokens"] is None
    assert broken["score"] == 0.0


def test_export_marks_replayed_attempts(
    pytester: pytest.Pytester, run_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a resume, attempts recorded by the earlier session are marked replayed, those
    judged again by changed graders regraded, and new ones not at all."""
    solid = pytester.path / "ds/solid.yaml"
    solid.write_text(json.dumps(task(expected="other", metadata={"answers": ["ok"]})))
    pytester.runpytest("--agenteval", "ds", "--attempts", "3", "--resume-suite")
    code, out, _ = out_of(capsys, "export", run_dir, "--format", "jsonl")
    reused = {(r["task"], r["attempt"]): r["reused"] for r in map(json.loads, out.splitlines())}
    assert code == 0 and reused[("math/add/2", 0)] == "replayed"
    assert reused[("solid", 0)] == reused[("solid", 1)] == "regraded"
    assert reused[("solid", 2)] == reused[("math/add/2", 2)] == ""
    code, out, _ = out_of(capsys, "show", run_dir, "solid/1")
    assert "task solid attempt 1 (ds): fail (regraded)" in out


def test_diff_cli(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`diff` of two runs by id, folder or summary.json lists what changed and the interval."""
    dataset({f"t{i}.yaml": task("ok") for i in range(3)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "base")
    dataset({"t0.yaml": task("no"), "t3.yaml": task("ok")})
    (pytester.path / "ds/t2.yaml").unlink()
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "new")
    monkeypatch.chdir(pytester.path)
    runs = ".pytest_cache/agenteval/runs"
    for base in ("base", f"{runs}/base", f"{runs}/base/summary.json"):
        code, out, _ = out_of(capsys, "diff", base, "new")
        assert code == 0
        assert "pass@1 1.000 → 0.500 over 2 shared tasks: change -0.500" in out
        assert "regressed:\n  ds::t0: 1/1 → 0/1 (-1.00)" in out
        assert "only in new (not compared):\n  ds::t3" in out
        assert "only in base (not compared):\n  ds::t2" in out
    code, _, err = out_of(capsys, "diff", "nothing-here", "new")
    assert code == 1 and "no run 'nothing-here'" in err
    (pytester.path / "bad.json").write_text('{"schema": "other/1"}')
    code, _, err = out_of(capsys, "diff", "bad.json", "new")
    assert code == 1 and "bad.json is not an agenteval.summary/1 summary" in err


JUDGED_AGENT = """
from pytest_agenteval import AgentResult, Usage

def run(task):
    return AgentResult(output="ok", usage=Usage(input_tokens=10, output_tokens=5, cost=0.25))
"""


@pytest.fixture
def judged_run(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    """A run of one task with a 1,500-character input, `expected`, and a priced judge."""
    monkeypatch.setenv(KEY_ENV, KEY)
    root = dataset(
        {
            "t.yaml": {
                "input": "Q" * 1500,
                "expected": "ok",
                "graders": [{"judge": judged(0.9, "right")}, {"contains": ["ok"]}],
            }
        },
        manifest={"agent": "paid:run", "judge": judge_settings(chat_server), "pricing": PRICES},
    )
    (root / "paid.py").write_text(JUDGED_AGENT)
    pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-html", "r.html", "--junitxml", "junit.xml"
    )
    monkeypatch.chdir(pytester.path)
    return latest_run(pytester.path)


def test_show_attempt_shows_input_expected_and_the_judge(
    judged_run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show RUN TASK/N` shows the input (cut, `--full` shows all), `expected`, every grader's
    reason, the judge's threshold, model, cost, prompt and raw reply, and agent + judge cost."""
    code, out, _ = out_of(capsys, "show", judged_run, "t/0")
    assert code == 0
    assert "input:\n  " + "Q" * 1000 + "… [500 more characters]" in out
    assert "expected:\n  ok" in out
    assert "  pass judge (score 0.9): score 0.9 (>= 0.5): right" in out
    assert "    threshold 0.5 · model served-model-1 · retries 0 · cost 0.0006" in out
    assert "    prompt:\n      [system]" in out and "OUTPUT (data)" not in out
    assert '    reply:\n      {"score": 0.9, "reason": "right"}' in out
    assert "  pass contains" in out
    assert f"cost {0.25 + CALL_COST:.4f} (agent 0.2500, judge 0.0006)" in out
    assert "text(s) cut to 1000 characters; --full shows all" in out
    code, out, _ = out_of(capsys, "show", judged_run, "t/0", "--full")
    assert code == 0 and "input:\n  " + "Q" * 1500 + "\n" in out and "--full shows all" not in out
    assert "        RUBRIC:\n" in out
    code, out, _ = out_of(capsys, "show", judged_run, "t")
    assert f"cost {0.25 + CALL_COST:.4f}" in out


def test_export_cost_is_agent_and_judge(
    judged_run: str, capsys: pytest.CaptureFixture[str], pytester: pytest.Pytester
) -> None:
    """Export's `cost` is everything the attempt cost, with `agent_cost` and `judge_cost`;
    so is the attempt's JUnit property `cost`, with `judge_cost` beside it."""
    code, out, _ = out_of(capsys, "export", judged_run, "--format", "jsonl")
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert row["cost"] == pytest.approx(0.25 + CALL_COST)
    assert (row["agent_cost"], row["judge_cost"]) == (0.25, pytest.approx(CALL_COST))
    code, out, _ = out_of(capsys, "export", judged_run)
    (csv_row,) = csv.DictReader(io.StringIO(out))
    assert float(csv_row["cost"]) == pytest.approx(0.25 + CALL_COST)
    assert float(csv_row["judge_cost"]) == pytest.approx(CALL_COST)
    junit = (pytester.path / "junit.xml").read_text()
    assert f'<property name="cost" value="{0.25 + CALL_COST:.4f}"' in junit
    assert '<property name="judge_cost" value="0.0006"' in junit


def test_show_takes_the_form_the_terminal_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`TASK[VARIANT]/N` (the summary's form) and `TASK[VARIANT-attempt-N]` (the item name) show
    that attempt; `TASK[VARIANT]` lists its attempts; a misspelt variant names the run's."""
    cache = tmp_path / "cache"
    write_variant_run(cache).close()
    where = ("--cache-dir", str(cache))
    for target in ("better[cand]/1", "better[cand-attempt-1]"):
        code, out, _ = out_of(capsys, "show", "vr", target, *where)
        assert code == 0 and out.startswith("task better attempt 1 (ds, variant cand): fail\n")
    code, out, _ = out_of(capsys, "show", "vr", "worse[base]", *where)
    assert code == 0 and "task worse: 1/2 attempts passed (variant base)" in out
    code, _, err = out_of(capsys, "show", "vr", "better[cnad]/1", *where)
    assert code == 1 and "no variant 'cnad' in this run (did you mean 'cand'?)" in err
