"""The regression gate: --agenteval-baseline and --agenteval-max-regression end to end."""

from __future__ import annotations

from typing import Any

import pytest

from helpers import DatasetMaker, summary_of, task
from pytest_agenteval.cli import main
from pytest_agenteval.reporting.gate import gate
from pytest_agenteval.reporting.regression import regression_block, regression_lines
from pytest_agenteval.reporting.summary import Summary

RUNS = ".pytest_cache/agenteval/runs"
REASON = (
    "pass@1 fell by 0.667 against baseline base (95 % interval -0.917 to -0.417, paired "
    "bootstrap over tasks), more than --agenteval-max-regression 0"
)


def made(tasks: list[tuple[str, str, int, int]], **top: Any) -> Summary:
    """A summary holding these (dataset, task id, n, c) tasks, and `top`'s fields."""
    return Summary.model_validate(
        {
            "run_id": "base",
            "dataset": {"name": "ds", "version": "1"},
            "datasets": [{"name": "ds", "version": "1"}],
            "agent": {"label": "a", "fingerprint": {}},
            "created_at": 0.0,
            "finished_at": 0.0,
            "status": "complete",
            "n_attempts": sum(n for _, _, n, _ in tasks),
            "counts": {"pass": 0, "fail": 0, "error": 0},
            "metrics": {"pass_at_k": {}, "pass_power_k": {}, "tasks_per_k": {}, "n_tasks": 0},
            "totals": {},
            "tags": {},
            "tasks": [
                {"dataset": d, "task_id": t, "tags": [], "n": n, "c": c, "errors": 0}
                | {"pass_at_k": {}, "pass_power_k": {}, "attempts": []}
                for d, t, n, c in tasks
            ],
            **top,
        }
    )


def baseline(pytester: pytest.Pytester, dataset: DatasetMaker, n: int) -> None:
    """A run `base` of n tasks that all pass."""
    dataset({f"t{i}.yaml": task("ok") for i in range(n)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "base").assert_outcomes(passed=n)


def gate_args(base: str = "base") -> list[str]:
    # --agenteval-min-pass-rate 0: failed attempts alone do not fail the run, the gate decides.
    return ["--agenteval", "ds", "--agenteval-baseline", base, "--agenteval-min-pass-rate", "0"]


def test_clear_regression_fails(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """8 of 12 tasks failing now: exit 1 and the reason in the terminal, summary.md and
    summary.json; a generous --agenteval-max-regression lets it pass."""
    baseline(pytester, dataset, 12)
    dataset({f"t{i}.yaml": task("no") for i in range(8)})
    result = pytester.runpytest(*gate_args(), "--agenteval-run-id", "new")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "regression gate against baseline base: FAILED: a fall of more than 0 "
            "(--agenteval-max-regression), significant at 95 %",
            "pass@1 1.000 → 0.333 over 12 shared tasks: change -0.667, 95 % interval *",
            "regressed: 8",
            "  ds::t0: 1/1 → 0/1",
            f"gate NOT met: {REASON}*",
        ]
    )
    summary = summary_of(pytester, "new")
    block = summary["regression"]
    assert block["failed"] and block["significant"] and block["change"] == pytest.approx(-2 / 3)
    assert block["baseline_run_id"] == "base" and len(block["regressed"]) == 8
    markdown = (pytester.path / RUNS / "new/summary.md").read_text()
    assert "FAILED: a fall of more than 0" in markdown and "change -0.667" in markdown
    result = pytester.runpytest(*gate_args(), "--agenteval-max-regression", "0.9")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["regression gate against baseline base: passed: no fall*"])


@pytest.mark.slow
def test_regression_gate_under_xdist(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """Under xdist the controller loads the baseline and fails the run the same way."""
    baseline(pytester, dataset, 12)
    dataset({f"t{i}.yaml": task("no") for i in range(8)})
    result = pytester.runpytest_subprocess(*gate_args(), "-n", "2", "-p", "xdist")
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"gate NOT met: {REASON}*"])


def test_identical_runs_pass(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """The same results as the baseline (named by its summary.json): no change, exit 0."""
    baseline(pytester, dataset, 4)
    result = pytester.runpytest(*gate_args(f"{RUNS}/base/summary.json"))
    assert result.ret == 0
    block = summary_of(pytester)["regression"]
    assert block["change"] == 0 and block["ci95"] == [0.0, 0.0] and not block["failed"]


def test_noise_passes_and_missing_tasks_are_reported(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """One of five tasks flipping is not significant: the run passes the gate, says so, and
    lists the task that is new and the one that is gone."""
    baseline(pytester, dataset, 5)
    dataset({"t0.yaml": task("no"), "extra.yaml": task("ok")})
    (pytester.path / "ds/t4.yaml").unlink()
    result = pytester.runpytest(*gate_args())
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "regression gate against baseline base: passed: the fall is not significant *",
            "pass@1 1.000 → 0.750 over 4 shared tasks: change -0.250, * (*; not significant)",
            "regressed: 1",
            "  ds::t0: 1/1 → 0/1",
            "only in this run (not compared): 1",
            "  ds::extra",
            "only in the baseline (not compared): 1",
            "  ds::t4",
        ]
    )
    block = summary_of(pytester)["regression"]
    assert not block["failed"] and not block["significant"]
    assert block["only_in_new"] == [{"dataset": "ds", "task_id": "extra"}]
    assert block["only_in_base"] == [{"dataset": "ds", "task_id": "t4"}]


def test_bad_baseline_is_a_usage_error(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """A baseline that cannot be found, or a max regression without one, stops the session
    at the start with one clear line (exit 4), never a traceback."""
    dataset({"a.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-baseline", "nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --agenteval-baseline nope: no run 'nope' in *; and 'nope' is no file"]
    )
    assert "Traceback" not in result.stderr.str()
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-max-regression", "0.1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --agenteval-max-regression needs --agenteval-baseline*"])


def test_both_gates_apply() -> None:
    """A pass rate that meets --agenteval-min-pass-rate does not hide a significant fall."""
    base = made([("ds", f"t{i}", 1, 1) for i in range(10)])
    summary = made(
        [("ds", f"t{i}", 1, int(i >= 6)) for i in range(10)],
        counts={"pass": 4, "fail": 6, "error": 0},
        metrics={"pass_at_k": {"1": 0.4}, "pass_power_k": {}, "tasks_per_k": {}, "n_tasks": 10},
    )
    block = regression_block(summary, base, "base", 0.1)
    summary = summary.model_copy(update={"regression": block})
    result = gate(summary, min_pass_rate=0.3, allow_errors=False, other_failures=0, exitstatus=1)
    assert result.exitstatus == 1 and result.message is not None
    assert result.message.startswith("gate NOT met: pass@1 fell by 0.600 against baseline base")
    assert result.message.endswith("pass@1 0.400 alone would meet 0.3")


def test_a_baseline_sharing_no_task_says_nothing_was_compared() -> None:
    """A baseline of another dataset (or with renamed tasks) cannot fail the gate; the verdict
    says that nothing was compared instead of a bare `passed`."""
    base = made([("other", "t0", 1, 1)])
    summary = made([("ds", "t0", 1, 0)])
    block = regression_block(summary, base, "base", 0.0)
    assert not block.failed and block.shared_tasks == 0
    assert regression_lines(block, verbose=False)[0] == (
        "regression gate against baseline base: passed, but nothing was compared: no task is "
        "in both runs (is the baseline a run of these datasets?)"
    )


def test_agenteval_diff_gates_a_significant_fall_like_the_session(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`agenteval diff --max-regression X` exits 1 on the fall the session's gate fails (more
    than X, significant at 95 %) and 0 on a tolerated or noisy one; without X it only reports."""
    baseline(pytester, dataset, 12)
    dataset({f"t{i}.yaml": task("no") for i in range(8)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "new").assert_outcomes(
        passed=4, failed=8
    )
    dataset({f"t{i}.yaml": task("no" if i == 0 else "ok") for i in range(12)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "noise")
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert main(["diff", "base", "new"]) == 0
    assert "gate" not in capsys.readouterr().out
    assert main(["diff", "base", "new", "--max-regression", "0.1"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "gate NOT met: " + REASON.replace(
        " against baseline base", ""
    ).replace("--agenteval-max-regression 0", "--max-regression 0.1")
    assert main(["diff", "base", "new", "--max-regression", "0.7"]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == "gate met: no fall of more than --max-regression 0.7"
    )
    assert main(["diff", "base", "noise", "--max-regression", "0"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "gate met: the fall is more than --max-regression 0 but not significant at 95 %"
