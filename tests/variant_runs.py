"""A stored run with variants written record by record, and its summary: what the views of
variants are tested on."""

from __future__ import annotations

from pathlib import Path

from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.model import AgentResult, Status, Usage, Verdict
from pytest_agenteval.core.records import AttemptRecord, new_record
from pytest_agenteval.reporting.runref import stored_run
from pytest_agenteval.reporting.summary import (
    Summary,
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
TAGS = {
    "agree": ["all", "easy"],
    "better": ["all", "hard"],
    "worse": ["all", "easy", "hard"],
    "solo": ["own"],
}
"""Each task's tags: `all` has three tasks (an interval), `own` only the task with its own
agent."""


def variant_record(task: str, attempt: int, variant: str | None, status: Status) -> AttemptRecord:
    """One attempt whose output names its variant, with a verdict and a cost."""
    output = f"{variant or 'own'} answer {attempt} of {task}"
    return new_record(
        key=AttemptId(dataset="ds", task_id=task, variant=variant, attempt=attempt),
        digest="d1",
        run_digest="r1",
        agent={"variant": variant},
        tags=TAGS[task],
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
    agents = {"ds": {v: f"agent:{v}" for v in VARIANTS}}
    fingerprint = {"override": None, "manifest": {"ds": None}, "variants": agents}
    store.create_run(run_id, [{"name": "ds", "version": "1"}], fingerprint, extra=extra)
    for task, by_variant in OUTCOMES.items():
        for variant, statuses in by_variant.items():
            for attempt, status in enumerate(statuses):
                store.commit(run_id, variant_record(task, attempt, variant, status))
    store.finish_run(run_id, "complete", {})
    return store


def variant_summary(store: Store, run_id: str = "vr") -> Summary:
    """The run's summary as the session writes it: `variants`, `reference`, `comparison` and
    one task entry per task and variant; top-level metrics absent (several variants)."""
    info, rows = stored_run(store, run_id)
    return build_summary(info, rows, ks=None, session_counts={}, status="complete")
