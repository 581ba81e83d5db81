"""The numbers of a run with variants: per-variant metrics, the selection, and the comparison
with the reference variant (the same paired bootstrap as `agenteval diff`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import aid
from pytest_agenteval.core.model import AgentResult, Status
from pytest_agenteval.core.records import new_record
from pytest_agenteval.reporting.diff import compare, task_rates
from pytest_agenteval.reporting.gate import GateResult, gate
from pytest_agenteval.reporting.metrics import AttemptRow, task_metrics
from pytest_agenteval.reporting.regression import regression_lines, with_regression
from pytest_agenteval.reporting.summary import Summary, build_summary
from pytest_agenteval.store.index import IndexRow
from pytest_agenteval.store.merge import Part, merged_variants
from pytest_agenteval.store.runs import RunInfo, Store

DS = [{"name": "ds", "version": "1"}]


def row(
    task: str,
    attempt: int,
    status: str,
    variant: str | None,
    cost: float | None = None,
    tags: tuple[str, ...] = (),
) -> IndexRow:
    """An index row of one attempt of `variant` (None: a task without variant)."""
    return IndexRow(
        aid("ds", task, attempt, variant),
        "d",
        "r",
        status,
        None,
        0.5,
        10 if cost is not None else None,
        5 if cost is not None else None,
        cost,
        tags,
        "" if status == "pass" else "wrong",
        None,
        "",
        variant=variant,
    )


def run_info(variants: list[str] | None, reference: str | None = None) -> RunInfo:
    agent = {"override": None, "manifest": {}, "variants": {"ds": {"a": "m:a", "b": "m:b"}}}
    return RunInfo(
        "r1", DS, agent, 0.0, 0.0, 0, 0, "complete", [], variants=variants, reference=reference
    )


def summarize(rows: list[IndexRow], variants: list[str] | None, **kw: str) -> Summary:
    return build_summary(
        run_info(variants, **kw), rows, ks=None, session_counts={}, status="complete"
    )


def rows_of(variant: str | None, counts: list[tuple[int, int]]) -> list[IndexRow]:
    """Task t<i> with n attempts of which c pass, for each (n, c)."""
    return [
        row(f"t{i}", j, "pass" if j < c else "fail", variant)
        for i, (n, c) in enumerate(counts)
        for j in range(n)
    ]


A = [(2, 2), (2, 2), (2, 1), (2, 0)]
B = [(2, 1), (2, 2), (2, 2), (2, 0)]


def test_the_agent_label_names_the_variants_not_the_manifests_missing_agent() -> None:
    """A manifest with `variants:` and no `agent:` is labelled by its variants, never `None`."""
    info = replace(run_info(["a", "b"]), agent={**run_info(None).agent, "manifest": {"ds": None}})
    summary = build_summary(info, rows_of("a", A), ks=None, session_counts={}, status="complete")
    assert summary.agent.label == "variants a, b"


def test_two_variants_of_one_task_are_two_tasks() -> None:
    """Metrics group attempts by (dataset, task, variant): two variants are never pooled."""
    attempts = [
        AttemptRow("ds", "t", 0, "pass", variant="a"),
        AttemptRow("ds", "t", 1, "pass", variant="a"),
        AttemptRow("ds", "t", 0, "fail", variant="b"),
        AttemptRow("ds", "t", 0, "fail"),
    ]
    tasks = task_metrics(attempts)
    assert [(t.variant, t.n, t.c) for t in tasks] == [(None, 1, 0), ("a", 2, 2), ("b", 1, 0)]


def test_each_variant_has_its_numbers_and_the_top_level_metrics_are_absent() -> None:
    """Several variants: one VariantSummary each, tasks per (task, variant), no pooled metrics."""
    summary = summarize(rows_of("a", A) + rows_of("b", B), ["a", "b"])
    assert summary.metrics is None and summary.tags == {}
    assert summary.variants is not None and list(summary.variants) == ["a", "b"]
    a, b = summary.variants["a"], summary.variants["b"]
    assert a.agent == "m:a" and b.agent == "m:b"
    assert a.metrics.pass_at_k["1"] == pytest.approx(5 / 8)
    assert b.metrics.pass_at_k["1"] == pytest.approx(5 / 8)
    assert (a.counts.passed, a.counts.fail) == (5, 3)
    assert [(t.task_id, t.variant) for t in summary.tasks][:3] == [
        ("t0", "a"),
        ("t0", "b"),
        ("t1", "a"),
    ]
    data = summary.to_json()
    assert "metrics" not in data and data["reference"] == "a"
    assert data["tasks"][0]["variant"] == "a"
    assert Summary.model_validate(data) == summary


def test_one_selected_variant_gives_the_top_level_metrics_their_meaning() -> None:
    """With one selected variant, the top-level metrics and tags are that variant's."""
    summary = summarize(rows_of("a", A) + rows_of("b", B), ["b"])
    assert summary.variants is not None and list(summary.variants) == ["b"]
    assert summary.metrics == summary.variants["b"].metrics
    assert summary.comparison == [] and summary.not_selected == ["a"]
    assert summary.n_attempts == 8


def test_unselected_variants_are_left_out_and_named() -> None:
    """A variant the run did not select stays out of every number and is listed."""
    rows = rows_of("a", A) + rows_of("b", B) + rows_of("gone", [(2, 0)] * 4)
    summary = summarize(rows, ["a", "b"])
    assert summary.not_selected == ["gone"]
    assert summary.n_attempts == 16 and summary.counts.fail == 6
    assert {t.variant for t in summary.tasks} == {"a", "b"}


def test_the_reference_comes_first() -> None:
    """`--agenteval-reference b`: b leads `variants`, and the others are compared with it."""
    summary = summarize(rows_of("a", A) + rows_of("b", B), ["a", "b"], reference="b")
    assert summary.variants is not None and list(summary.variants) == ["b", "a"]
    assert summary.reference == "b"
    assert summary.comparison is not None
    (entry,) = summary.comparison
    assert (entry.variant, entry.reference) == ("a", "b")


def test_a_task_with_its_own_agent_is_listed_apart() -> None:
    """A task without variant in a run with variants is kept, in no variant's numbers."""
    rows = rows_of("a", A) + rows_of("b", B) + [row("own", 0, "pass", None)]
    summary = summarize(rows, ["a", "b"])
    assert summary.variants is not None
    assert [t.variant for t in summary.tasks if t.task_id == "own"] == [None]
    assert all(v.metrics.n_tasks == 4 for v in summary.variants.values())
    assert summary.n_attempts == 17


def test_the_comparison_flips_and_costs() -> None:
    """Tasks that flip are listed with the reference's c/n as `base`; costs per attempt, per
    pass."""
    rows = [
        row("t0", 0, "pass", "a", cost=1.0),
        row("t0", 0, "fail", "b", cost=0.5),
        row("t1", 0, "fail", "a", cost=1.0),
        row("t1", 0, "pass", "b", cost=0.5),
        row("t2", 0, "fail", "a", cost=1.0),
        row("t2", 0, "fail", "b", cost=0.5),
    ]
    summary = summarize(rows, ["a", "b"])
    assert summary.comparison is not None
    (entry,) = summary.comparison
    assert [(m.task_id, m.base, m.new) for m in entry.better] == [("t1", "0/1", "1/1")]
    assert [(m.task_id, m.base, m.new) for m in entry.worse] == [("t0", "1/1", "0/1")]
    assert entry.change == 0.0 and entry.shared_tasks == 3
    assert (entry.cost_per_attempt, entry.cost_per_pass) == (0.5, 1.5)
    assert (entry.reference_cost_per_attempt, entry.reference_cost_per_pass) == (1.0, 3.0)


counts = st.integers(1, 4).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n)))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(counts, counts), min_size=1, max_size=12))
def test_the_comparison_is_agenteval_diffs(pairs: list[tuple[tuple[int, int], ...]]) -> None:
    """The change is the mean of per-task differences, and change and interval equal what
    `agenteval diff` computes from two summaries of the same two variants' attempts."""
    ref, new = [p[0] for p in pairs], [p[1] for p in pairs]
    summary = summarize(rows_of("ref", ref) + rows_of("new", new), ["ref", "new"])
    assert summary.comparison is not None
    (entry,) = summary.comparison
    expected = sum(c2 / n2 - c1 / n1 for (n1, c1), (n2, c2) in pairs) / len(pairs)
    assert entry.change == pytest.approx(expected)
    alone = [summarize(rows_of(None, side), None) for side in (ref, new)]
    diff = compare(task_rates(alone[0].tasks), task_rates(alone[1].tasks))
    assert entry.change == diff.change.change
    assert entry.ci95 == (list(diff.change.interval) if diff.change.interval else None)
    assert (entry.method, entry.significant) == (diff.change.method, diff.change.significant)
    assert entry.shared_tasks == len(pairs)


def commit(
    store: Store, task: str, attempt: int, status: Status, variant: str, run_id: str = "r1"
) -> None:
    """Commit one attempt of `variant` through the store, as a session does."""
    store.commit(
        run_id,
        new_record(
            key=aid("ds", task, attempt, variant),
            digest="d",
            run_digest="r",
            agent={"override": None},
            tags=["x"],
            status=status,
            verdicts=[],
            result=AgentResult(output="o"),
            started_at=1.0,
            duration=0.5,
        ),
    )


def test_a_stored_run_of_variants_summarizes_from_its_records(tmp_path: Path) -> None:
    """Records written with `variant` through the store come back as per-variant numbers."""
    store = Store(tmp_path)
    store.create_run("r1", DS, {"override": None})
    for task in ("t0", "t1", "t2"):
        commit(store, task, 0, "pass", "a")
        commit(store, task, 0, "fail" if task != "t0" else "pass", "b")
    commit(store, "t0", 0, "fail", "old")
    info = store.run("r1")
    assert info is not None
    rows, _ = store.index("r1", for_plan=False)
    summary = build_summary(
        replace(info, variants=["a", "b"], reference="a"),
        rows,
        ks=None,
        session_counts={},
        status="complete",
    )
    store.close()
    assert summary.variants is not None
    assert {n: v.metrics.pass_at_k["1"] for n, v in summary.variants.items()} == {
        "a": 1.0,
        "b": pytest.approx(1 / 3),
    }
    assert summary.variants["a"].tags["x"].n_tasks == 3
    assert summary.not_selected == ["old"]
    assert summary.comparison is not None and summary.comparison[0].change == pytest.approx(-2 / 3)


def test_a_run_without_run_json_variants_takes_the_variants_its_records_name() -> None:
    """A run whose run.json does not list variants (an older merge) still never pools them."""
    summary = summarize(rows_of("b", B) + rows_of("a", A), None)
    assert summary.variants is not None and list(summary.variants) == ["a", "b"]
    assert summary.metrics is None


def judged(summary: Summary, min_pass_rate: float | None) -> GateResult:
    return gate(
        summary, min_pass_rate=min_pass_rate, allow_errors=False, other_failures=0, exitstatus=1
    )


def test_min_pass_rate_holds_for_every_variant_and_names_who_failed() -> None:
    """`--agenteval-min-pass-rate` fails the run when one variant is below, naming it."""
    summary = summarize(rows_of("a", [(1, 1)] * 4) + rows_of("b", [(1, 1), (1, 0)] * 2), ["a", "b"])
    result = judged(summary, 0.8)
    assert result.exitstatus == 1
    assert result.message == "gate NOT met: pass@1 of variant b 0.500 is below 0.8"
    met = judged(summary, 0.5)
    assert met.exitstatus == 0
    assert met.message == (
        "gate met: pass@1 of variant a 1.000, of variant b 0.500 >= 0.5 (--agenteval-min-pass-rate)"
    )


def test_each_variant_is_compared_with_the_baselines_same_named_variant() -> None:
    """The baseline gate pairs variants by name; a variant the baseline lacks is said, and
    only a significant fall of a variant fails the run."""
    good = [(1, 1)] * 12
    base = summarize(rows_of("a", good) + rows_of("b", good), ["a", "b"])
    now = summarize(
        rows_of("a", good) + rows_of("b", [(1, 0)] * 12) + rows_of("c", good), ["a", "b", "c"]
    )
    judged_now = with_regression(now, base, "base", 0.0)
    assert judged_now.regression is None and judged_now.variants is not None
    blocks = {n: v.regression for n, v in judged_now.variants.items()}
    assert blocks["a"] is not None and not blocks["a"].failed and blocks["a"].change == 0.0
    assert blocks["b"] is not None and blocks["b"].failed and blocks["b"].variant == "b"
    assert blocks["c"] is not None and blocks["c"].missing and not blocks["c"].failed
    assert regression_lines(blocks["c"], verbose=False) == [
        "regression gate of variant c against baseline base (run r1): not compared (the "
        "baseline has no variant c)"
    ]
    result = judged(judged_now, None)
    assert result.exitstatus == 1 and result.message is not None
    assert result.message.startswith("gate NOT met: pass@1 of variant b fell by 1.000")
    assert "variant a" not in result.message and "variant c" not in result.message
    assert judged(with_regression(base, base, "base", 0.0), None).exitstatus is None


def test_a_run_without_variants_is_compared_as_before() -> None:
    """Without variants the regression block is the run's, and the gate line is unchanged."""
    base = summarize(rows_of(None, [(1, 1)] * 12), None)
    now = summarize(rows_of(None, [(1, 0)] * 12), None)
    judged_now = with_regression(now, base, "base", 0.0)
    assert judged_now.variants is None and judged_now.regression is not None
    assert judged_now.regression.failed and "variant" not in judged_now.regression.model_dump()
    assert judged(judged_now, 0.5).message == (
        "gate NOT met: pass@1 fell by 1.000 against baseline base (run r1) (95 % interval "
        "-1.000 to -1.000, paired bootstrap over tasks), more than --agenteval-max-regression 0; "
        "pass@1 0.000 is below 0.5"
    )


def test_merge_carries_the_variants_and_the_reference_over(tmp_path: Path) -> None:
    """The merged run.json keeps the shards' selected variants and reference (none without)."""
    info = run_info(["a", "b"], reference="b")
    shard = replace(info, variants=["a", "b", "c"], reference="b")
    parts = [Part(tmp_path, info, [], tmp_path), Part(tmp_path, shard, [], tmp_path)]
    assert merged_variants(parts) == {"variants": ["a", "b", "c"], "reference": "b"}
    assert merged_variants([Part(tmp_path, run_info(None), [], tmp_path)]) == {}
