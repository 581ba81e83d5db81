"""A stored run with variants written record by record, and its summary joined from one
summary per variant (as summary.json holds it): what the views of variants are tested on."""

from __future__ import annotations

from pathlib import Path

from pytest_agenteval.core.model import AgentResult, Status, Usage, Verdict
from pytest_agenteval.core.records import AttemptRecord, attempt_key, new_record
from pytest_agenteval.reporting.diff import TaskChange, compare, variant_rates
from pytest_agenteval.reporting.runref import stored_run
from pytest_agenteval.reporting.summary import (
    Summary,
    TaskMove,
    TaskSummary,
    VariantComparison,
    VariantSummary,
    build_summary,
)
from pytest_agenteval.store.runs import Store

VARIANTS = ["base", "cand"]
"""The run's variants, the reference first."""
OUTCOMES: dict[str, dict[str | None, list[Status]]] = {
    "agree": {"base": ["pass", "pass"], "cand": ["pass", "pass"]},
    "better": {"base": ["fail", "fail"], "cand": ["pass", "fail"]},
    "worse": {"base": ["pass", "fail"], "cand": ["fail", "error"]},
    "solo": {None: ["pass"]},
}
"""Each task's statuses by variant and attempt; `solo` names its own agent (no variant)."""
COST = {"base": 0.1, "cand": 0.3, None: 0.2}


def variant_record(task: str, attempt: int, variant: str | None, status: Status) -> AttemptRecord:
    """One attempt whose output names its variant, with a verdict and a cost."""
    output = f"{variant or 'own'} answer {attempt} of {task}"
    return new_record(
        key=attempt_key("ds", task, attempt, variant),
        digest="d1",
        run_digest="r1",
        agent={"variant": variant},
        tags=["t"],
        status=status,
        verdicts=[] if status == "error" else [Verdict("equals", status == "pass", status, 1.0)],
        result=AgentResult(output=output, usage=Usage(input_tokens=10, cost=COST[variant])),
        started_at=1.0,
        duration=0.5,
        error="boom" if status == "error" else None,
        phase="agent" if status == "error" else None,
    )


def write_variant_run(cache: Path, run_id: str = "vr") -> Store:
    """A finished run of OUTCOMES in the cache dir `cache`."""
    store = Store(cache / "agenteval")
    extra = {"variants": VARIANTS, "reference": VARIANTS[0]}
    store.create_run(run_id, [{"name": "ds", "version": "1"}], {"override": None}, extra=extra)
    for task, by_variant in OUTCOMES.items():
        for variant, statuses in by_variant.items():
            for attempt, status in enumerate(statuses):
                store.commit(run_id, variant_record(task, attempt, variant, status))
    store.finish_run(run_id, "complete", {})
    return store


def variant_summary(store: Store, run_id: str = "vr") -> Summary:
    """The run's summary with `variants`, `reference`, `comparison` and one task entry per
    task and variant; top-level metrics absent (several variants)."""
    info, rows = stored_run(store, run_id)

    def built(variant: str | None) -> Summary:
        mine = [r for r in rows if r.variant == variant]
        return build_summary(info, mine, ks=None, session_counts={}, status="complete")

    parts = {v: built(v) for v in (*VARIANTS, None)}
    tasks = [t.model_copy(update={"variant": v}) for v, s in parts.items() for t in s.tasks]
    variants = {v: numbers(v, s) for v, s in parts.items() if v is not None}
    pooled = build_summary(info, rows, ks=None, session_counts={}, status="complete")
    whole = pooled.model_copy(
        update={
            "tasks": tasks,
            "metrics": None,
            "variants": variants,
            "reference": VARIANTS[0],
            "comparison": [comparison(tasks, VARIANTS[0], v) for v in VARIANTS[1:]],
        }
    )
    return Summary.model_validate(whole.to_json())


def numbers(variant: str, alone: Summary) -> VariantSummary:
    """A variant's part of the summary: the numbers of its attempts summarized alone."""
    assert alone.metrics is not None
    return VariantSummary(
        agent=f"agent:{variant}",
        counts=alone.counts,
        metrics=alone.metrics,
        totals=alone.totals,
        tags=alone.tags,
    )


def comparison(tasks: list[TaskSummary], reference: str, variant: str) -> VariantComparison:
    """`variant` against `reference` with `agenteval diff`'s function, as the summary has it."""
    diff = compare(variant_rates(tasks, reference), variant_rates(tasks, variant))

    def moves(changes: list[TaskChange]) -> list[TaskMove]:
        return [
            TaskMove(
                dataset=c.key[0],
                task_id=c.key[1],
                base=f"{c.base.c}/{c.base.n}",
                new=f"{c.new.c}/{c.new.n}",
            )
            for c in changes
        ]

    change = diff.change
    return VariantComparison(
        variant=variant,
        reference=reference,
        shared_tasks=change.shared,
        change=change.change,
        ci95=list(change.interval) if change.interval else None,
        method=change.method,
        significant=change.significant,
        better=moves(diff.improved),
        worse=moves(diff.regressed),
        cost_per_attempt=COST[variant],
        cost_per_pass=None,
        reference_cost_per_attempt=COST[reference],
        reference_cost_per_pass=None,
    )
