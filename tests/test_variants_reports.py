"""The reports of a run with variants: the leaderboard (terminal, summary.md) and one JUnit
testsuite per variant, against golden files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from junitparser import xunit2

from pytest_agenteval.cli import main
from pytest_agenteval.core.model import Status
from pytest_agenteval.glue.reporter import variant_regressions
from pytest_agenteval.reporting.regression import with_regression
from pytest_agenteval.reporting.reports import render_markdown, terminal_lines, write_reports
from pytest_agenteval.reporting.runref import run_summary
from pytest_agenteval.reporting.summary import build_summary
from pytest_agenteval.store.runs import Store
from test_variants_summary import DS, commit, row, rows_of, run_info, summarize

GOLDEN = Path(__file__).parent / "golden" / "reports" / "variants"
"""`agenteval/runs/var1`: two variants (base, cand) of four tasks, two attempts each, and a
task with its own agent, written through the store API; `expected/var1`: its reports."""


def test_reports_of_a_run_with_variants_match_the_golden_files(tmp_path: Path) -> None:
    """`agenteval report` of a run with variants writes the leaderboard into summary.md, the
    variants and their comparison into summary.json, a testsuite per variant into junit.xml."""
    shutil.copytree(GOLDEN / "agenteval", tmp_path / "agenteval")
    out = tmp_path / "out"
    assert main(["report", "var1", "--cache-dir", str(tmp_path), "--out", str(out)]) == 0
    for name in ("summary.json", "summary.md", "junit.xml"):
        expected = (GOLDEN / "expected" / "var1" / name).read_text(encoding="utf-8")
        assert (out / name).read_text(encoding="utf-8") == expected, name


def test_junit_has_one_testsuite_per_variant() -> None:
    """Each variant's tasks are a testsuite named after it; tasks with their own agent and
    tasks that could not be loaded are in the `agenteval` suite."""
    (suite_a, suite_b, own) = list(
        xunit2.JUnitXml.fromfile(str(GOLDEN / "expected/var1/junit.xml"))
    )
    assert (suite_a.name, suite_b.name, own.name) == (
        "agenteval[base]",
        "agenteval[cand]",
        "agenteval",
    )
    assert [len(list(s)) for s in (suite_a, suite_b, own)] == [4, 4, 1]
    assert (suite_a.failures, suite_b.failures, own.failures) == (1, 1, 0)
    assert {p.name: p.value for p in suite_b.properties()}["pass_at_1"] == "0.75"


def test_the_terminal_leaderboard_marks_a_significant_change() -> None:
    """The terminal's leaderboard shows each variant's pass@1, the change against the
    reference with `*` when its interval excludes 0, the flips, and the variants left out."""
    rows = rows_of("a", [(1, 0)] * 12) + rows_of("b", [(1, 1)] * 12)
    rows += [*rows_of("gone", [(1, 1)]), row("own", 0, "pass", None)]
    lines = terminal_lines(summarize(rows, ["a", "b"]), verbose=False, rule="any")
    board = lines[lines.index(next(x for x in lines if x.startswith("variants"))) :]
    assert (
        board[0]
        == "variants (reference a; *: the change's 95 % interval (paired, over shared tasks) excludes 0):"
    )
    header = "variant agent pass@1 95% CI vs a 95% CI vs a tokens cost cost/pass"
    assert " ".join(board[1].split()) == header
    assert board[2].split()[:5] == ["a", "m:a", "0.000", "0.000-0.210", "reference"]
    assert board[3].split()[:7] == ["b", "m:b", "1.000", "0.790-1.000", "+1.000", "*", "+1.000"]
    assert board[4].startswith("  b better than a on t0 (0/1 → 1/1), t1 (0/1 → 1/1)")
    assert board[4].endswith(", … 7 more (-v shows all)")
    assert "  tasks with their own agent (not compared): own 1/1" in board
    assert "  not selected (their records are kept, out of these numbers): gone" in board
    assert "  0/1  t0[a]  ✗ rule any" in lines


def test_markdown_shows_each_variants_baseline_verdict() -> None:
    """summary.md gives each variant's regression verdict against the baseline."""
    base = summarize(rows_of("a", [(1, 1)] * 3), ["a"])
    now = with_regression(
        summarize(rows_of("a", [(1, 1)] * 3) + rows_of("b", [(1, 1)] * 3), ["a", "b"]),
        base,
        "base",
        0.0,
    )
    text = render_markdown(now, "any")
    assert (
        "**regression gate of variant a against baseline base (run r1): passed: no fall of more than 0**"
        in text
    )
    assert (
        "**regression gate of variant b against baseline base (run r1): not compared (the baseline has no variant b)**"
        in text
    )
    assert "| t0 | a | 1/1 |" in text


def test_the_summary_of_a_run_with_variants_matches_its_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """summary.json with variants, comparison and a task without variant passes `agenteval
    schema summary`."""
    assert main(["schema", "summary"]) == 0
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    validator.validate(json.loads((GOLDEN / "expected/var1/summary.json").read_text()))


def test_agenteval_report_shows_each_variants_stored_baseline_verdict(tmp_path: Path) -> None:
    """The verdicts per variant a session stored in run.json come back in `agenteval report`
    (its summary equals the session's)."""
    shutil.copytree(GOLDEN / "agenteval", tmp_path / "agenteval")
    store = Store(tmp_path / "agenteval")
    summary = run_summary(store, "var1")
    judged = with_regression(summary, summary, "var1", 0.0)
    run_json = tmp_path / "agenteval/runs/var1/run.json"
    meta = json.loads(run_json.read_text())
    meta["sessions"][-1].update(variant_regressions(judged))
    run_json.write_text(json.dumps(meta))
    again = run_summary(store, "var1")
    store.close()
    assert again.variants == judged.variants
    assert again.variants is not None and again.variants["cand"].regression is not None
    assert variant_regressions(summary) == {}


def test_tasks_that_could_not_be_loaded_are_errors_in_the_agenteval_suite(tmp_path: Path) -> None:
    """With variants, a task file that could not be loaded is an <error> testcase of the
    `agenteval` suite beside the variants' suites."""
    summary = build_summary(
        run_info(["a", "b"]),
        rows_of("a", [(1, 1)]) + rows_of("b", [(1, 0)]),
        ks=None,
        session_counts={},
        status="complete",
        load_errors=[{"path": "bad.yaml", "label": "bad", "message": "bad.yaml:1: at x: y"}],
    )
    (path,) = [p for p in write_reports(summary, tmp_path, "any") if p.name == "junit.xml"]
    suites = {s.name: s for s in xunit2.JUnitXml.fromfile(str(path))}
    assert list(suites) == ["agenteval[a]", "agenteval[b]", "agenteval"]
    assert (suites["agenteval"].tests, suites["agenteval"].errors) == (1, 1)
    assert (suites["agenteval[b]"].tests, suites["agenteval[b]"].failures) == (1, 1)


def shard_store(root: Path, shard: str, tasks: dict[str, tuple[Status, Status]]) -> Path:
    """A cache dir holding shard `shard`'s run: for each task, variant a's and b's verdict."""
    store = Store(root / "agenteval")
    run_id = f"s{shard[0]}"
    store.create_run(run_id, DS, {"override": None}, shard=shard, extra={"variants": ["a", "b"]})
    for name, statuses in tasks.items():
        for variant, status in zip(("a", "b"), statuses, strict=True):
            commit(store, name, 0, status, variant, run_id=run_id)
    store.finish_run(run_id, "complete", {"finished_at": 1.0, "exitstatus": 0, "counts": {}})
    return root


def test_merged_shards_of_variants_are_gated_per_variant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval merge` keeps each variant's records apart: its gate fails the variant below
    `--min-pass-rate` by name, and junit.xml has a suite per variant."""
    one = shard_store(tmp_path / "one", "1/2", {"t0": ("pass", "pass"), "t1": ("pass", "fail")})
    two = shard_store(tmp_path / "two", "2/2", {"t2": ("pass", "fail"), "t3": ("pass", "pass")})
    out = tmp_path / "out"
    code = main(["merge", str(one), str(two), "--out", str(out), "--min-pass-rate", "0.8"])
    printed = capsys.readouterr().out
    assert code == 1
    assert "gate NOT met: pass@1 of variant b 0.500 is below 0.8" in printed
    (run,) = (out / "agenteval" / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert "metrics" not in summary and list(summary["variants"]) == ["a", "b"]
    assert summary["comparison"][0]["change"] == -0.5
    suites = [s.name for s in xunit2.JUnitXml.fromfile(str(run / "junit.xml"))]
    assert suites == ["agenteval[a]", "agenteval[b]"]


def test_tags_by_variant_in_the_terminal_and_markdown(tmp_path: Path) -> None:
    """A run with variants shows each tag's pass@1 with its interval per variant in the
    terminal (capped, -v shows all) and in summary.md; a variant without a task of the tag
    shows a dash."""
    from variant_runs import variant_summary, write_variant_run

    summary = variant_summary(write_variant_run(tmp_path / "cache"))
    lines = terminal_lines(summary, verbose=False, rule="any")
    at = lines.index("pass@1 (95% CI) by tag and variant:")
    assert lines[at + 1 : at + 5] == [
        "  tag   tasks  base                 cand",
        "  all       3  0.500 (0.000-1.000)  0.500 (0.000-1.000)",
        "  easy      2  0.750 (n/a)          0.500 (n/a)",
        "  hard      2  0.250 (n/a)          0.250 (n/a)",
    ]
    assert "by tag:" not in lines
    text = render_markdown(summary, "any")
    assert "| tag | tasks | base | cand |\n|---|---|---|---|\n" in text
    assert "| all | 3 | 0.500 (0.000-1.000) | 0.500 (0.000-1.000) |" in text
    assert summary.variants is not None
    many = {f"tag{i:02}": summary.variants["base"].metrics for i in range(12)}
    parts = {
        "base": summary.variants["base"].model_copy(update={"tags": many}),
        "cand": summary.variants["cand"],
    }
    wide = summary.model_copy(update={"variants": parts})
    lines = terminal_lines(wide, verbose=False, rule="any")
    assert "  … 5 more tags (-v shows all)" in lines  # 12 + all, easy, hard: 10 shown
    assert any(line.startswith("  tag00") and line.endswith("  -") for line in lines)
    assert "  … 5 more tags (-v shows all)" not in terminal_lines(wide, verbose=True, rule="any")
