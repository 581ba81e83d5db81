"""Summaries and reports: exact metrics, per-attempt and per-task JUnit, the CI gate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from junitparser import xunit2

from helpers import WORKERS, DatasetMaker, aid, summary_of, task
from pytest_agenteval.cli import main
from pytest_agenteval.core.errors import ReportError
from pytest_agenteval.core.text import xml_safe
from pytest_agenteval.reporting.finish import GateRule, finish_run
from pytest_agenteval.reporting.reports import write_reports
from pytest_agenteval.reporting.summary import Summary, build_summary, narrowed_words
from pytest_agenteval.store.runs import IndexRow, RunInfo

KNOWN = {
    "always.yaml": task(metadata={"answers": ["ok"]}, tags=["easy"]),
    "once.yaml": task(metadata={"answers": ["ok", "no", "no"]}, tags=["easy", "hard"]),
    "never.yaml": task(metadata={"answers": ["no"]}, tags=["hard"]),
    "crash.yaml": task(metadata={"raise": "down"}, tags=["hard"]),
}


def test_summary_json_has_exact_metrics(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Known outcomes give exactly the Chen pass@k and pass^k means; errors are counted apart."""
    dataset(KNOWN)
    pytester.runpytest("--agenteval", "ds", "--attempts", "3").assert_outcomes(
        passed=4, failed=5, errors=3
    )
    summary = summary_of(pytester)
    Summary.model_validate(summary)
    assert summary["schema"] == "agenteval.summary/1"
    assert summary["counts"] == {
        "pass": 4,
        "fail": 5,
        "error": 3,
        "over_budget": 0,
        "error_classes": {"agent_error": 3},
        "reused": 0,
        "regraded": 0,
        "run": 12,
        "load_error": 0,
    }
    assert summary["n_attempts"] == 12 and summary["status"] == "complete"
    assert summary["dataset"] == {"name": "ds", "version": "1"}
    m = summary["metrics"]
    assert m["n_tasks"] == 4
    assert m["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 5 / 12, "3": 0.5})
    assert m["pass_power_k"] == pytest.approx({"1": 1 / 3, "2": 0.25, "3": 0.25})
    assert m["tasks_per_k"] == {"1": 4, "2": 4, "3": 4}
    assert summary["tags"]["easy"]["pass_at_k"]["1"] == pytest.approx(2 / 3)
    assert summary["tags"]["hard"]["n_tasks"] == 3
    tasks = {t["task_id"]: t for t in summary["tasks"]}
    assert (tasks["once"]["n"], tasks["once"]["c"], tasks["crash"]["errors"]) == (3, 1, 3)
    assert tasks["once"]["pass_power_k"]["2"] == 0.0
    assert [a["status"] for a in tasks["once"]["attempts"]] == ["pass", "fail", "fail"]
    assert tasks["never"]["attempts"][0]["reason"] == "equals: expected 'ok', got 'no'"
    assert tasks["crash"]["attempts"][0]["reason"] == "RuntimeError: down"


def test_chosen_ks_and_undefined_k(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """--pass-k picks ks; a k above a task's attempt count is null, never a number."""
    dataset(KNOWN)
    pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--pass-k", "1,5")
    m = summary_of(pytester)["metrics"]
    assert set(m["pass_at_k"]) == {"1", "5"} and m["pass_at_k"]["5"] is None
    assert m["tasks_per_k"]["5"] == 0


def test_report_dir_markdown_and_step_summary(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--agenteval-report DIR gets the three files; GITHUB_STEP_SUMMARY gets the Markdown."""
    dataset(KNOWN)
    step = pytester.path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "3", "--agenteval-report", "out")
    result.stdout.fnmatch_lines(
        [
            "*= agenteval =*",
            "run * (complete) * dataset ds 1 * 4 tasks, 12 attempts",
            "4 passed, 5 failed, 3 errors; 12 run now",
            "pass@k @1 0.333  @2 0.417  @3 0.500*",
            "pass^k ^1 0.333  ^2 0.250  ^3 0.250",
            "tasks, lowest pass rate first:",
            "  0/3  crash (3 errors)*",
            "  0/3  never*",
            "  1/3  once",
            "written: *out/summary.json, *out/summary.md, *out/junit.xml",
        ]
    )
    markdown = (pytester.path / "out/summary.md").read_text()
    assert "| 2 | 0.417 | 0.250 | 4 |" in markdown
    assert step.read_text() == markdown + "\n"


def parse_junit(path: Path) -> dict[str, Any]:
    xml = xunit2.JUnitXml.fromfile(str(path))
    cases = {}
    for suite in xml:
        for case in suite:
            assert isinstance(case, xunit2.TestCase)  # what an xunit2 suite holds
            props = {p.name: p.value for p in case.properties()}
            cases[case.name] = (case, props)
    return cases


@pytest.mark.parametrize("workers", WORKERS)
def test_per_attempt_junit_properties(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """--junitxml: one testcase per attempt with its properties; failure vs error; also -n 2."""
    dataset(KNOWN)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "3", "--junitxml=out.xml", *workers
    )
    result.assert_outcomes(passed=4, failed=5, errors=3)
    cases = parse_junit(pytester.path / "out.xml")
    assert len(cases) == 12
    case, props = cases["once[attempt-1]"]
    assert case.is_failure and props["task_id"] == "once" and props["attempt"] == "1"
    assert props["status"] == "fail" and props["score"] == "0.0" and float(props["duration"]) >= 0
    case, props = cases["crash[attempt-2]"]
    assert case.is_error and props["status"] == "error"
    case, props = cases["always[attempt-0]"]
    assert case.is_passed and props["status"] == "pass" and props["score"] == "1.0"


def test_per_attempt_junit_has_usage(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    root = dataset({"a.yaml": task(expected="x")}, manifest={"agent": "usage_agent:run"})
    (root / "usage_agent.py").write_text(
        "from pytest_agenteval import AgentResult, Usage\n"
        "def run(task):\n"
        "    return AgentResult(output='x', usage=Usage(input_tokens=10, output_tokens=5, cost=0.02))\n"
    )
    pytester.runpytest("--agenteval", "ds", "--junitxml=out.xml")
    _, props = parse_junit(pytester.path / "out.xml")["a[attempt-0]"]
    assert (props["tokens"], props["cost"]) == ("15", "0.02")
    totals = summary_of(pytester)["totals"]
    assert (totals["input_tokens"], totals["output_tokens"], totals["cost"]) == (10, 5, 0.02)


@pytest.mark.parametrize(
    ("rule", "failing"),
    [
        ("any", {"never", "crash"}),
        ("all", {"once", "never", "crash"}),
        ("0.3", {"never", "crash"}),
        ("0.5", {"once", "never", "crash"}),
    ],
)
def test_per_task_junit(
    pytester: pytest.Pytester, dataset: DatasetMaker, rule: str, failing: set[str]
) -> None:
    """junit.xml: one testcase per task with n, c, pass@k; it fails when the task rule is missed."""
    dataset(KNOWN)
    pytester.runpytest(
        "--agenteval",
        "ds",
        "--attempts",
        "3",
        "--agenteval-report",
        "out",
        "--agenteval-task-rule",
        rule,
    )
    xml = xunit2.JUnitXml.fromfile(str(pytester.path / "out/junit.xml"))
    (suite,) = list(xml)
    suite_props = {p.name: p.value for p in suite.properties()}
    assert suite_props["pass_at_1"] == "0.3333"  # rounded for people; summary.json keeps 1/3
    assert json.loads(suite_props["pass_at_k"])["3"] == 0.5
    cases = {c.name: c for c in suite}
    assert {name for name, c in cases.items() if not c.is_passed} == failing
    assert xml.tests == suite.tests == len(cases)
    assert xml.failures + xml.errors == suite.failures + suite.errors == len(failing)
    assert xml.time == suite.time == pytest.approx(sum(c.time for c in cases.values()), abs=0.01)
    assert all(c.classname == "ds" for c in cases.values())
    once = cases["once"]
    assert isinstance(once, xunit2.TestCase)  # what an xunit2 suite holds
    props = {p.name: p.value for p in once.properties()}
    assert (props["n"], props["c"]) == ("3", "1")
    assert json.loads(props["pass_at_k"]) == {"1": 0.3333, "2": 0.6667, "3": 1.0}
    assert cases["crash"].is_error
    assert "RuntimeError: down" in cases["crash"].result[0].text
    if "once" in failing:
        assert "attempt 1 fail: equals: expected 'ok', got 'no'" in cases["once"].result[0].text


@pytest.mark.parametrize(
    ("args", "ret", "message"),
    [
        (
            ["--agenteval-min-pass-rate", "0.45"],
            0,
            "gate met: pass@1 0.500 >= 0.45 (--agenteval-min-pass-rate)",
        ),
        (["--agenteval-min-pass-rate", "0.55"], 1, "gate NOT met: pass@1 0.500 is below 0.55"),
        ([], 1, None),
    ],
)
def test_gate_exit_codes(
    pytester: pytest.Pytester, dataset: DatasetMaker, args: list[str], ret: int, message: str | None
) -> None:
    """The gate decides the exit status: 0 when met although attempts failed, 1 when not."""
    dataset(
        {k: v for k, v in KNOWN.items() if k != "crash.yaml"}
        | {"two.yaml": task(metadata={"answers": ["ok", "ok", "no", "no", "ok"]})}
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "5", *args)
    assert result.ret == ret
    if message:
        result.stdout.fnmatch_lines([message])


def test_gate_and_errors(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Errored attempts fail the gate unless --agenteval-allow-errors."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok"), "c.yaml": task(metadata={"raise": "x"})})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-min-pass-rate", "0.5")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "gate NOT met: 1 attempt(s) errored (--agenteval-allow-errors accepts them); "
            "pass@1 0.667 alone would meet 0.5"
        ]
    )
    result = pytester.runpytest(
        "--agenteval", "ds", "--agenteval-min-pass-rate", "0.5", "--agenteval-allow-errors"
    )
    assert result.ret == 0


def test_hostile_output_keeps_every_file_valid(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Control characters, lone surrogates, invalid UTF-8 and huge outputs never break a file."""
    root = dataset(
        {
            "ctl.yaml": task(expected="x"),
            "big.yaml": task(expected="x"),
            "bytes.yaml": {
                **task(expected="x"),
                "agent": {"command": ["{python}", "{dataset}/raw.py"]},
            },
        },
        manifest={"agent": "hostile:run"},
    )
    (root / "hostile.py").write_text(
        "def run(task):\n"
        "    if task.id == 'big':\n"
        "        return 'y' * 2_000_000\n"
        "    return 'bad \\x1b[31m\\x00\\x08 \\udcff | `tick` </failure> ]]>'\n"
    )
    (root / "raw.py").write_text(
        "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00 not utf8')\n"
    )
    pytester.runpytest(
        "--agenteval", "ds", "--agenteval-report", "out", "--junitxml=attempts.xml"
    ).assert_outcomes(failed=3)
    out = pytester.path / "out"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert len(json.dumps(summary)) < 100_000
    for path in (out / "junit.xml", pytester.path / "attempts.xml"):
        assert len(list(xunit2.JUnitXml.fromfile(str(path)))) == 1
    (out / "summary.md").read_text(encoding="utf-8")
    reasons = [a["reason"] for t in summary["tasks"] for a in t["attempts"]]
    assert any("truncated" in r for r in reasons)


def test_junit_xml_escapes_what_a_hand_edited_store_could_hold(tmp_path: Path) -> None:
    """Ids are validated at collection, but `agenteval report` renders whatever a store holds."""
    weird = 'a<&>"\x02 ]]>'
    rows = [
        IndexRow(
            aid(weird, weird, i), "", "", status, 1.0, 0.25, None, None, None, (), weird, None, ""
        )
        for i, status in enumerate(["pass", "fail", "error"])
    ]
    run = RunInfo("r1", [{"name": weird, "version": "1"}], {}, 0.0, 0.0, 3, 3, "complete", [])
    summary = build_summary(run, rows, ks=None, session_counts={}, status="complete")
    (path,) = [p for p in write_reports(summary, tmp_path, "all") if p.name == "junit.xml"]
    (suite,) = list(xunit2.JUnitXml.fromfile(str(path)))
    (case,) = list(suite)
    assert case.name == case.classname == xml_safe(weird)
    assert (suite.tests, suite.failures, suite.errors, suite.time) == (1, 1, 0, 0.75)
    assert "attempt 2 error" in case.result[0].text


def test_provider_agent_label_names_its_model() -> None:
    """A provider agent's label reads `openai:MODEL`, not its options as JSON (the fingerprint
    keeps them)."""
    from pytest_agenteval.reporting.summary import _agent_label

    spec = 'openai:{"api_key_env": "K", "model": "gpt-4o-mini", "temperature": 0}'
    fingerprint = {"override": None, "manifest": {"ds": spec + " (version 3)"}, "version": None}
    assert _agent_label(fingerprint) == "openai:gpt-4o-mini (version 3)"
    assert _agent_label({"override": 'vibes:{"x": 1}', "manifest": {}}) == "vibes"


def test_every_report_of_a_narrowed_run_says_by_what_and_how_much(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `-k` run says it is narrowed, by what and how many of the suite's attempts it holds in
    the terminal, summary.json/md, JUnit, the GitHub step summary, HTML and a re-rendering."""
    dataset({"one.yaml": task("ok"), "one_more.yaml": task("no"), "two.yaml": task("ok")})
    steps = pytester.path / "steps.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(steps))
    args = ["--agenteval", "ds", "--attempts", "2", "-k", "one", "--agenteval-html", "r.html"]
    result = pytester.runpytest(*args, "--agenteval-run-id", "part")
    result.assert_outcomes(passed=2, failed=2)
    words = "narrowed by -k 'one' (4 of 6 attempts)"
    result.stdout.fnmatch_lines([f"{words}: the metrics cover these attempts only"])
    summary = summary_of(pytester, "part")
    Summary.model_validate(summary)
    assert (summary["status"], summary["narrowed"]) == ("complete", True)
    assert summary["narrowed_by"] == "-k 'one' (4 of 6 attempts)"
    run_dir = pytester.path / ".pytest_cache/agenteval/runs/part"
    status_line = f"status **complete** · **{words}** · 2 tasks, 4 attempts"
    assert status_line in (run_dir / "summary.md").read_text()
    assert status_line in steps.read_text()
    assert f'id="narrowed">{words}</p>' in (pytester.path / "r.html").read_text().replace(
        "&#x27;", "'"
    )
    suite = next(iter(xunit2.JUnitXml.fromfile(str(run_dir / "junit.xml"))))
    assert {p.name: p.value for p in suite.properties()}["narrowed"] == words
    monkeypatch.chdir(pytester.path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert main(["report", "part", "--out", "again"]) == 0
    again = json.loads((pytester.path / "again/summary.json").read_text())
    assert (again["narrowed"], again["narrowed_by"]) == (True, summary["narrowed_by"])
    assert status_line in (pytester.path / "again/summary.md").read_text()
    whole = pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "whole")
    assert "narrowed by" not in whole.stdout.str()
    assert summary_of(pytester, "whole")["narrowed"] is False


def test_narrowed_words_name_the_shard_and_the_selection() -> None:
    """A shard run says which shard it is, beside what else narrowed it; a whole run says
    nothing."""
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], {}, 0.0, 0.0, 0, 0, "complete", [])
    whole = build_summary(run, [], ks=None, session_counts={}, status="complete")
    shard = whole.model_copy(update={"shard": "1/3"})
    assert narrowed_words(shard) == "narrowed by shard 1/3"
    both = whole.model_copy(update={"shard": "2/3", "narrowed_by": "-m 'slow' (2 of 9 attempts)"})
    assert narrowed_words(both) == "narrowed by -m 'slow' (2 of 9 attempts), shard 2/3"
    assert narrowed_words(whole) is None


def test_a_rerendered_summary_equals_the_sessions(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agenteval report RUN` writes the summary.json the session wrote, agents that could not
    be built and the regression gate's verdict included (timing aside)."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "base")
    tasks: dict[str, str | dict[str, Any]] = {f"t{i}.yaml": task("no") for i in range(4)}
    dataset({**tasks, "lost.yaml": {**task("ok"), "agent": "nosuchmodule:run"}})
    args = ["--agenteval", "ds", "--agenteval-baseline", "base", "--agenteval-run-id", "new"]
    assert pytester.runpytest(*args).ret == 1
    session = summary_of(pytester, "new")
    assert session["agent_errors"][0]["attempts"] == 1 and session["regression"]["failed"]
    monkeypatch.chdir(pytester.path)
    assert main(["report", "new", "--out", "again"]) == 0
    again = json.loads((pytester.path / "again/summary.json").read_text())
    timing = {"finished_at"}
    assert {k: v for k, v in again.items() if k not in timing} == {
        k: v for k, v in session.items() if k not in timing
    }


def test_finish_run_fails_the_gate_of_a_run_whose_reports_cannot_be_written(
    tmp_path: Path,
) -> None:
    """The end shared by the session, `agenteval report` and `merge`: the files, the HTML
    page, then the gate; a report folder that cannot be made leaves the run interrupted (the
    gate fails it), the HTML page is still written, and the failure is handed back."""
    rows = [
        IndexRow(aid("ds", "t", i), "", "", "pass", 1.0, 0.25, None, None, None, (), "", None, "")
        for i in range(2)
    ]
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], {}, 0.0, 0.0, 2, 2, "complete", [])
    summary = build_summary(run, rows, ks=None, session_counts={}, status="complete")
    rule = GateRule(min_pass_rate=0.5, allow_errors=False)
    good = finish_run(summary, out_dir=tmp_path / "out", task_rule="any", rule=rule)
    assert not good.failures and [p.name for p in good.written] == [
        "summary.json",
        "summary.md",
        "junit.xml",
    ]
    assert good.gate is not None and good.gate.message == (
        "gate met: pass@1 1.000 >= 0.5 (--agenteval-min-pass-rate)"
    )
    (tmp_path / "file").write_text("")
    page = tmp_path / "page.html"

    def write_page(summary: Summary) -> Path:
        page.write_text(summary.status)
        return page

    bad = finish_run(
        summary,
        out_dir=tmp_path / "file/out",
        task_rule="any",
        html=write_page,
        rule=rule,
    )
    assert isinstance(bad.failures[0], ReportError) and bad.written == [page]
    assert bad.summary.status == page.read_text() == "interrupted"
    assert summary.status == "complete"  # the summary given is frozen: a new one says it
    assert bad.gate is not None and bad.gate.message is not None
    assert bad.gate.message.startswith("gate NOT met: the run is interrupted")
