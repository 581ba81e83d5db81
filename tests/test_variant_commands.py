"""`agenteval show`, `export` and `diff` on a run with variants: choosing the variant, the
`variant` column, comparing two variants of one run, and bad names listing the run's variants."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from pytest_agenteval.cli import main
from pytest_agenteval.reporting.diff import change_line, compare, variant_rates
from pytest_agenteval.reporting.export import COLUMNS
from test_cli import agenteval
from test_store import record
from variant_runs import variant_summary, write_variant_run


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache dir holding run `vr` (variants base and cand) and run `plain` (none)."""
    folder = tmp_path / "cache"
    store = write_variant_run(folder)
    store.create_run("plain", [{"name": "ds", "version": "1"}], {})
    store.commit("plain", record("t", 0))
    store.finish_run("plain", "complete", {})
    store.close()
    return folder


def run_cli(capsys: pytest.CaptureFixture[str], cache: Path, *argv: str) -> tuple[int, str, str]:
    """`agenteval ARGV --cache-dir CACHE` in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    code = main([*argv, "--cache-dir", str(cache)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_show_lists_tasks_per_variant_and_chooses_an_attempt(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show RUN` has a line per task and variant; `TASK/N --variant NAME` and `TASK/VARIANT/N`
    show that variant's attempt; `TASK` lists the attempts of every variant."""
    done = agenteval("show", "vr", "better/1", "--variant", "cand", "--cache-dir", str(cache))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("task better attempt 1 (ds, variant cand): fail\n")
    assert "cand answer 1 of better" in done.stdout
    code, out, _ = run_cli(capsys, cache, "show", "vr", "better/cand/0")
    assert code == 0 and "task better attempt 0 (ds, variant cand): pass" in out
    code, out, _ = run_cli(capsys, cache, "show", "vr")
    lines = out.splitlines()
    assert code == 0 and "4 tasks, 13 attempts · variants base, cand" in lines[0]
    assert [line.split() for line in lines[2:5]] == [
        ["2/2", "0", "0", "base", "agree"],
        ["2/2", "0", "0", "cand", "agree"],
        ["0/2", "2", "0", "base", "better"],
    ]
    assert ["1/1", "0", "0", "-", "solo"] in [line.split() for line in lines]
    assert "TASK_ID/N --variant NAME (or TASK_ID/VARIANT/N)" in lines[-1]
    code, out, _ = run_cli(capsys, cache, "show", "vr", "worse")
    assert code == 0 and "task worse: 1/4 attempts passed (variant base, cand)" in out
    assert [line.split()[:3] for line in out.splitlines()[1:5]] == [
        ["0", "base", "pass"],
        ["1", "base", "fail"],
        ["0", "cand", "fail"],
        ["1", "cand", "error"],
    ]
    code, out, _ = run_cli(capsys, cache, "show", "vr", "worse/base", "--variant", "base")
    assert code == 0 and "task worse: 1/2 attempts passed (variant base)" in out
    code, out, _ = run_cli(capsys, cache, "show", "vr", "solo/0")
    assert code == 0 and out.startswith("task solo attempt 0 (ds): pass\n")
    code, out, _ = run_cli(capsys, cache, "show", "vr", "--variant", "cand")
    assert code == 0 and "3 tasks, 6 attempts" in out
    assert {line.split()[3] for line in out.splitlines()[2:-1]} == {"cand"}


def test_show_ambiguous_attempt_and_bad_variant_name_the_variants(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`TASK/N` that several variants ran is one line listing them and how to choose; an
    unknown variant lists the run's variants; a run without variants says it has none."""
    done = agenteval("show", "vr", "agree/0", "--cache-dir", str(cache))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr == (
        "agenteval: task 'agree' attempt 0 ran in 2 variants: base, cand; choose one: "
        "agenteval show vr agree/0 --variant NAME (or agree/NAME/0)\n"
    )
    code, _, err = run_cli(capsys, cache, "show", "vr", "agree/0", "--variant", "cnad")
    assert code == 1
    assert "no variant 'cnad' in run vr (did you mean 'cand'?); its variants: base, cand" in err
    code, _, err = run_cli(capsys, cache, "show", "vr", "solo/0", "--variant", "cand")
    assert code == 1 and "task 'solo' has no attempt of variant 'cand'" in err
    code, _, err = run_cli(capsys, cache, "show", "vr", "agree/base/0", "--variant", "cand")
    assert code == 1 and "names variant 'base' but --variant says 'cand'" in err
    code, _, err = run_cli(capsys, cache, "show", "plain", "t/0", "--variant", "cand")
    assert code == 1 and "run plain has no variants" in err


def test_export_has_a_variant_column_only_with_variants(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run with variants exports a `variant` column after `task` (empty for a task with its
    own agent) and `--variant` keeps one variant's rows; a run without variants keeps its
    columns; a bad name lists the variants."""
    done = agenteval("export", "vr", "--cache-dir", str(cache))
    assert done.returncode == 0, done.stderr
    header, *_ = done.stdout.splitlines()
    assert header.startswith("dataset,task,variant,attempt,status,")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 13
    assert {(r["task"], r["variant"]) for r in rows if r["attempt"] == "1"} == {
        (task, variant) for task in ("agree", "better", "worse") for variant in ("base", "cand")
    }
    assert next(r for r in rows if r["task"] == "solo")["variant"] == ""
    code, out, _ = run_cli(capsys, cache, "export", "vr", "--variant", "cand", "--format", "jsonl")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(lines) == 6 and {r["variant"] for r in lines} == {"cand"}
    assert next(r for r in lines if r["task"] == "worse" and r["attempt"] == 1)["cost"] == 0.3
    code, out, _ = run_cli(capsys, cache, "export", "plain")
    assert code == 0 and out.splitlines()[0] == ",".join(COLUMNS)
    code, _, err = run_cli(capsys, cache, "export", "vr", "--variant", "nope")
    assert code == 1 and "no variant 'nope' in run vr; its variants: base, cand" in err


def test_diff_of_two_variants_of_one_run_is_the_summarys_comparison(
    cache: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`diff RUN RUN --base-variant A --new-variant B` gives the change and interval of
    `compare(variant_rates(...))`, the function the summary's `comparison` uses; `--variant`
    compares same-named variants of two runs; a run of several variants needs one named."""
    summary = variant_summary(write_variant_run(tmp_path / "other"))
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary.to_json()))
    expected = compare(variant_rates(summary.tasks, "base"), variant_rates(summary.tasks, "cand"))
    assert summary.comparison is not None and summary.comparison[0].ci95 == list(
        expected.change.interval or []
    )
    done = agenteval(
        "diff", str(path), str(path), "--base-variant", "base", "--new-variant", "cand"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "variant base of run vr → variant cand of run vr"
    assert lines[1] == change_line(expected.change)
    assert "improved:\n  ds::better: 0/2 → 1/2 (+0.50)" in done.stdout
    assert "regressed:\n  ds::worse: 1/2 → 0/2 (-0.50)" in done.stdout
    code, out, _ = run_cli(capsys, cache, "diff", str(path), str(path), "--variant", "cand")
    assert code == 0 and "change +0.000" in out and "0 regressed, 0 improved" in out
    code, _, err = run_cli(capsys, cache, "diff", str(path), str(path))
    assert (
        code == 1
        and (
            "BASE (run vr) has variants base, cand: choose with --variant NAME (both sides) "
            "or --base-variant NAME"
        )
        in err
    )
    code, _, err = run_cli(capsys, cache, "diff", str(path), str(path), "--new-variant", "x")
    assert code == 1 and "BASE (run vr) has variants base, cand" in err
    argv = ("diff", str(path), str(path), "--base-variant", "base", "--new-variant", "x")
    code, _, err = run_cli(capsys, cache, *argv)
    assert code == 1 and "no variant 'x' in run vr; its variants: base, cand" in err
    code, _, err = run_cli(capsys, cache, "diff", "plain", str(path), "--variant", "cand")
    assert code == 1 and "run plain has no variants" in err
