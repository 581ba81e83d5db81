"""The run summary (`agenteval.summary/1`): built from stored attempt records only."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from ..core.gcpause import gc_paused
from ..core.text import counted
from ..store.index import IndexRow
from ..store.runs import RunInfo
from .metrics import (
    GroupMetrics,
    TaskMetrics,
    default_ks,
    group_metrics,
    tag_metrics,
    task_metrics,
    totals,
)
from .metrics import Totals as AttemptTotals
from .spend import cache_totals, pricing_coverage, spend_totals
from .variants import Selection, Side, by_variant, comparison, select_variants

SUMMARY_SCHEMA: Literal["agenteval.summary/1"] = "agenteval.summary/1"


class _Frozen(BaseModel):
    """A part of the summary: read-only once built, so every report sees the same numbers."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)


class AttemptSummary(_Frozen):
    """One recorded attempt of a task, in short."""

    index: int
    """The attempt's index, from 0."""
    status: Literal["pass", "fail", "error"]
    """`pass`, `fail` or `error`."""
    duration: float
    """Seconds the attempt took."""
    reason: str
    """Why it failed or errored, in a few words; empty for a pass."""


class TaskSummary(_Frozen):
    """One task: its counts, estimates and attempts."""

    dataset: str
    """The dataset's name."""
    task_id: str
    """The task's id."""
    tags: list[str]
    """The task's tags."""
    n: int
    """Attempts recorded."""
    c: int
    """Attempts that passed."""
    errors: int
    """Attempts that ended in an error."""
    pass_at_k: dict[str, float | None]
    """This task's pass@k for each k up to its attempts; keys are k as strings."""
    pass_power_k: dict[str, float | None]
    """This task's pass^k (all of k attempts pass) for each k; keys are k as strings."""
    attempts: list[AttemptSummary]
    """Each recorded attempt of the task, by index."""
    variant: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The variant that ran the task (a run with `variants:`); absent without one, and for a
    task that names its own `agent:` (it is not part of the comparison)."""


class AgentErrorSummary(_Frozen):
    """An agent that could not be built: its attempts did not start and are not recorded."""

    message: str
    """`path:line: at agent: problem`, and a `Hint:` line when something is close."""
    attempts: int
    """How many attempts of the last session did not start because of it."""


class Metrics(_Frozen):
    """pass@k and pass^k over a group of tasks (the run, or the tasks of one tag)."""

    pass_at_k: dict[str, float | None]
    """Mean over tasks with at least k attempts; keys are k as strings."""
    pass_power_k: dict[str, float | None]
    """pass^k (all of k attempts pass), mean over tasks with at least k attempts."""
    tasks_per_k: dict[str, int]
    """How many tasks each k is averaged over (those with at least k attempts)."""
    n_tasks: int
    """Tasks with at least one recorded attempt."""
    pass_at_1_stderr: float | None = None
    """pass@1's standard error over tasks, each task's attempt variance included; null below
    3 tasks."""
    pass_at_1_ci95: list[float] | None = None
    """pass@1's 95 % interval [low, high]: mean ± Student's t standard errors (see the
    statistics explanation in the docs); null below 3 tasks."""


class LoadErrorSummary(_Frozen):
    """A task (or task file) that could not be loaded: not evaluated, and it fails the gate."""

    dataset: str = ""
    """The dataset the file is in."""
    label: str = ""
    """The task's id, or its file when no id could be read."""
    path: str
    """The task file."""
    message: str
    """`file:line: at field: problem`, and a `Hint:` line when something is close."""

    @property
    def name(self) -> str:
        """What reports call the task: its id, else its file."""
        return self.label or self.path


class StoreProblemSummary(_Frozen):
    """Damage found in the run store; the summary was made without what it hides."""

    where: str
    """`path:line` (or the path) of the damage."""
    problem: str
    """What is wrong there."""
    effect: str
    """What happens because of it, e.g. "that attempt runs again" or "run skipped"."""


class PricingSummary(_Frozen):
    """Pricing coverage: attempts whose agent reported tokens, and how many had a cost."""

    priced: int
    """Attempts with usage and a cost (reported by the agent, or from `pricing:`)."""
    with_usage: int
    """Attempts whose agent reported tokens."""
    coverage: float | None
    """priced / with_usage; null when no attempt reported usage."""
    unpriced_models: list[str]
    """Models of attempts with usage but no cost: add them to `pricing:`."""


class DatasetSummary(_Frozen):
    """A dataset as its manifest names it."""

    name: str
    """The dataset's name (several datasets: joined by `+`)."""
    version: str
    """The dataset's version (several datasets: joined by `+`)."""


class AgentSummary(_Frozen):
    """The agent under test."""

    label: str
    """A short readable name: the override or the manifests' agents, and the version."""
    fingerprint: dict[str, Any]
    """What identifies it: its spec (`override`, or each dataset's `manifest` agent) and its
    declared `version`."""


class EnvironmentDrift(_Frozen):
    """A captured environment value that differs across the run's attempts."""

    name: str
    """The name in `sandbox: environment:`."""
    values: list[str]
    """The distinct values captured, sorted."""


class Counts(_Frozen):
    """Attempts by outcome over the run, and what the last session did; a session count is
    absent (null here) when the last session did not say."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    passed: int = Field(alias="pass")
    """Attempts that passed."""
    fail: int
    """Attempts that failed."""
    error: int
    """Attempts that ended in an error."""
    over_budget: int = 0
    """The errors whose agent used more than the task's `budget:` allows."""
    build_failed: int | None = None
    """The errors whose sandbox image could not be built or pulled (phase `build`); absent
    when none did."""
    sandbox_error: int | None = None
    """The errors whose sandbox failed under them, its Docker daemon or CLI (phase
    `sandbox`); absent when none did."""
    error_classes: dict[str, int] | None = None
    """The errors by class (`rate_limited`, `provider_error`, `timeout`, `agent_error`, ...;
    docs/reference/records.md lists them), most first; absent when there is no error."""
    retried: int | None = None
    """Attempts that needed a retry (`retry:`) in their session, whatever they ended in;
    absent when none did."""
    reused: int | None = None
    """Attempts the last session reused as they were recorded."""
    regraded: int | None = None
    """Attempts the last session graded again without calling the agent."""
    run: int | None = None
    """Attempts the last session ran."""
    load_error: int | None = None
    """Tasks (or task files) that could not be loaded in the last session."""

    @model_serializer(mode="wrap")
    def _present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """summary.json leaves out the session counts the last session did not give."""
        return {k: v for k, v in handler(self).items() if v is not None}


class Totals(_Frozen):
    """Sums and percentiles over the run's attempts; null when no attempt reported the value."""

    mean_score: float | None = None
    """The mean of the attempts' scores."""
    input_tokens: int | None = None
    """Input tokens the agents reported."""
    output_tokens: int | None = None
    """Output tokens the agents reported."""
    cost: float | None = None
    """What the recorded attempts cost: agents and LLM judges (the calls of attempts that
    were never recorded, and of the probe, are in the run's `spend`)."""
    agent_cost: float | None = None
    """What the agents cost."""
    judge_cost: float | None = None
    """What grading cost (LLM judges)."""
    duration_p50: float | None = None
    """The median attempt's seconds."""
    duration_p95: float | None = None
    """The 95th percentile of the attempts' seconds."""


class TaskRef(_Frozen):
    """A task on one side of a comparison only."""

    dataset: str
    """The dataset's name."""
    task_id: str
    """The task's id."""


class TaskMove(TaskRef):
    """A task whose pass rate changed against the baseline."""

    base: str
    """`c/n` in the baseline."""
    new: str
    """`c/n` in this run."""


class RegressionSummary(_Frozen):
    """This run against a baseline (`--agenteval-baseline`): pass@1's change over the tasks
    both runs hold and the regression gate's verdict."""

    baseline: str
    """The baseline as it was named (run id, `latest`, run folder or summary.json)."""
    baseline_run_id: str | None = None
    """The baseline's run id, when it has one."""
    max_regression: float
    """The fall of pass@1 allowed (`--agenteval-max-regression`)."""
    shared_tasks: int
    """Tasks in both runs: the change is over these."""
    base_pass_at_1: float | None
    """pass@1 of the baseline over the shared tasks."""
    new_pass_at_1: float | None
    """pass@1 of this run over the shared tasks."""
    change: float | None
    """new - base; null when no task is shared."""
    ci95: list[float] | None
    """The change's 95 % interval [low, high], by paired bootstrap over tasks."""
    method: str
    """How the interval was computed."""
    significant: bool
    """Whether the interval excludes zero."""
    failed: bool
    """Whether the regression gate failed the run: a significant fall of more than
    `max_regression`."""
    summary: str
    """The change in one line."""
    regressed: list[TaskMove]
    """Tasks whose pass rate fell."""
    improved: list[TaskMove]
    """Tasks whose pass rate rose."""
    only_in_new: list[TaskRef]
    """Tasks in this run only (not compared)."""
    only_in_base: list[TaskRef]
    """Tasks in the baseline only (not compared)."""
    variant: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """A run with `variants:`: the variant compared with the baseline's variant of the same
    name; absent without variants."""
    missing: bool = Field(default=False, exclude_if=lambda v: not v)
    """The baseline has no variant of this name: nothing was compared, and the gate is not
    failed by it; absent when false."""


class VariantSummary(_Frozen):
    """One variant of a run with `variants:`: every number the single-agent summary has,
    over the attempts of that variant."""

    agent: str
    """The variant's agent, readable (its fingerprint is in `agent.fingerprint`); `mixed: N
    agents` when its attempts were made by more than one (see `agents`)."""
    agents: dict[str, int] | None = Field(default=None, exclude_if=lambda v: v is None)
    """Only when the variant's attempts were made by more than one agent (a resume with
    `--agenteval-allow-drift` after its agent changed): each agent, readable, and how many of
    the variant's attempts it made; absent otherwise."""
    counts: Counts
    """pass / fail / error (and over_budget) over the variant's attempts."""
    metrics: Metrics
    """pass@k and pass^k over the variant's tasks, with pass@1's interval."""
    totals: Totals
    """Tokens, cost and durations over the variant's attempts."""
    tags: dict[str, Metrics]
    """The same metrics per tag."""
    regression: RegressionSummary | None = Field(default=None, exclude_if=lambda v: v is None)
    """With `--agenteval-baseline`: this variant against the baseline's same-named variant
    (`missing` when the baseline has none); absent without a baseline."""


class VariantComparison(_Frozen):
    """One variant against the reference variant, over the tasks both hold."""

    variant: str
    """The variant compared."""
    reference: str
    """The reference variant (the first, or `--agenteval-reference`)."""
    shared_tasks: int
    """Tasks both variants have attempts of."""
    change: float | None
    """pass@1 of the variant minus the reference's, over the shared tasks."""
    ci95: list[float] | None
    """The change's 95 % interval by paired bootstrap over tasks (as `agenteval diff`)."""
    method: str
    """How the interval was computed."""
    significant: bool
    """Whether the interval excludes 0."""
    better: list[TaskMove]
    """Tasks the variant passes more often than the reference (`base` is the reference)."""
    worse: list[TaskMove]
    """Tasks the variant passes less often than the reference."""
    cost_per_attempt: float | None
    """The variant's cost per attempt (agent + judge), None without costs."""
    cost_per_pass: float | None
    """The variant's cost per passed attempt, None without costs or passes."""
    reference_cost_per_attempt: float | None
    """The reference's cost per attempt."""
    reference_cost_per_pass: float | None
    """The reference's cost per passed attempt."""


class ProviderSummary(_Frozen):
    """One provider's adaptive in-flight limit at the end of the session."""

    limit: int
    """Requests it may have in flight now (halved on 429, regrown on success)."""
    max_in_flight: int
    """Its `limits: max_in_flight`."""
    rate_limited: int
    """429 answers it got."""


class ModelCacheSummary(_Frozen):
    """The model cache (`--agenteval-model-cache`) over the run's attempts."""

    hits: int
    """Model calls (agents' and judges') the cache answered: no request was sent."""
    misses: int
    """Model calls the cache was asked for and could not answer (they were sent)."""
    cost_saved: float | None
    """What the cached answers cost when they were first asked (counted in no cap and not
    in `totals.cost`); null when none had a known cost."""


class SpendSummary(_Frozen):
    """Everything the run paid for, every session of it (its ledger, which no session
    resets): what the spend and token caps count."""

    cost: float
    """Dollars of every model call the run made: of recorded attempts, of attempts a stop,
    a crash or Ctrl-C ended unrecorded, of the probe; a call whose reply said no usage, and
    one cancelled after it was sent or whose process was killed, counted at its worst case
    (its reservation: the server may have billed it)."""
    tokens: int
    """Tokens of those calls, counted the same way."""
    calls: int
    """Model calls paid for (through the provider seam, or recorded in an agent's trace; an
    agent that reports only its summed usage adds no call)."""


class Summary(_Frozen):
    """summary.json. Errored attempts count as not passed in pass@k / pass^k."""

    schema_: Literal["agenteval.summary/1"] = Field(SUMMARY_SCHEMA, alias="schema")
    """The format and its major version."""
    run_id: str
    """The run's id (`--agenteval-run-id`, or 8 hex digits)."""
    dataset: DatasetSummary
    """The dataset's name and version (several datasets: joined)."""
    datasets: list[DatasetSummary]
    """Each dataset of the run: name and version."""
    agent: AgentSummary
    """The agent: a readable label and its fingerprint."""
    created_at: float
    """When the run started (epoch seconds)."""
    finished_at: float
    """When this summary was made (epoch seconds)."""
    status: str
    """complete; interrupted (a session ended early); or why a stop ended it: cancelled,
    budget (a spend or token cap), deadline."""
    narrowed: bool = False
    """Whether the run holds only part of its datasets' attempts (`-k`, `-m`, node ids or paths
    inside a dataset, `--agenteval-shard`): its metrics cover that part only."""
    narrowed_by: str | None = None
    """What narrowed it and how many of the suite's attempts it holds, as run.json says, e.g.
    `-k 'add' (6 of 39 attempts)`; null for a whole run or a shard alone (see `shard`)."""
    agent_errors: list[AgentErrorSummary] = []
    """Agents that could not be built; their attempts did not run and are not recorded."""
    n_attempts: int
    """Attempts recorded in the run."""
    planned: int | None = None
    """Attempts the run set out to record (its selection of its datasets' tasks times attempts),
    when it ended before recording them all (a stop, an interruption); absent otherwise."""
    counts: Counts
    """pass / fail / error over the run (with variants: over the selected variants, and the
    tasks with their own agent), and over_budget: the errors whose agent used more than
    the task's `budget:` allows; build_failed: the errors whose sandbox image could not be had
    (absent when none); sandbox_error: the errors whose sandbox failed under them (absent
    when none); reused / regraded / run in the last session;
    load_error: the tasks (or task files) that could not be loaded in the last session."""
    metrics: Metrics | None = None
    """pass@k and pass^k over the run's tasks, with pass@1's interval; with one selected
    variant that variant's; absent for a run of several variants (see `variants`: their
    numbers are not pooled)."""
    totals: Totals
    """Tokens, cost (agent + judge, and each apart) and durations over the run."""
    tags: dict[str, Metrics]
    """The same metrics per tag, over the tasks that have it; empty for a run of several
    variants (each variant has its own)."""
    tasks: list[TaskSummary]
    """Each task's counts, pass@k and attempts; with variants one entry per task and variant."""
    load_errors: list[LoadErrorSummary] = []
    """Tasks that could not be loaded."""
    store_problems: list[StoreProblemSummary] = []
    """Damage in the run store found while the run was resumed or summarized."""
    pricing: PricingSummary | None = None
    """How many attempts with usage had a cost (reported, or from the manifest's `pricing:`)."""
    shard: str | None = None
    """`I/N` for a run of one shard (`--agenteval-shard`); absent for a run of every task."""
    environment_drift: list[EnvironmentDrift] = []
    """Each name of `sandbox: environment:` whose captured values differ across the run's
    attempts, with the distinct values; absent when none differ."""
    regression: RegressionSummary | None = None
    """With `--agenteval-baseline`: pass@1's change against the baseline over the tasks both
    runs hold (`change`, `ci95` by paired bootstrap over tasks, `significant`), whether the
    regression gate failed the run (`failed`), and the tasks that regressed, improved, or are
    in one run only (`only_in_new`, `only_in_base`); absent without a baseline."""
    variants: dict[str, VariantSummary] | None = None
    """A run with `variants:`: each selected variant's numbers, the reference first; absent
    without variants."""
    reference: str | None = None
    """The variant the others are compared with (the first, or `--agenteval-reference`)."""
    comparison: list[VariantComparison] | None = None
    """Each other variant against the reference over the tasks both hold."""
    not_selected: list[str] | None = None
    """Variants with records in the run that this summary leaves out (removed from the
    manifest, or not chosen by `--agenteval-variant`)."""

    providers: dict[str, ProviderSummary] | None = None
    """Each provider whose limits changed in this session (a 429 shrank its in-flight limit):
    its current `limit`, `max_in_flight` and the 429s it got; absent when none did."""
    model_cache: ModelCacheSummary | None = None
    """The model cache's hits, misses and the cost it saved over the run's attempts; absent
    when no attempt's call asked the cache."""
    spend: SpendSummary | None = None
    """Everything the run paid for in all its sessions (`totals.cost` is the recorded
    attempts'); absent for a run stored without a spend ledger."""

    def to_json(self) -> dict[str, Any]:
        """summary.json's content as plain types, in its order (the optional parts only when
        there is one)."""
        absent = {name for name in _OPTIONAL if getattr(self, name) is None}
        absent |= set() if self.environment_drift else {"environment_drift"}
        return self.model_dump(by_alias=True, exclude=absent)


_OPTIONAL = (
    "planned",
    "metrics",
    "shard",
    "regression",
    "variants",
    "reference",
    "comparison",
    "not_selected",
    "providers",
    "model_cache",
    "spend",
)
"""Parts of summary.json left out when they are None."""


@gc_paused()
def build_summary(
    run: RunInfo,
    rows: Sequence[IndexRow],
    *,
    ks: Sequence[int] | None,
    session_counts: dict[str, int],
    status: str,
    agent_errors: list[dict[str, Any]] | None = None,
    load_errors: list[dict[str, str]] | None = None,
    store_problems: list[dict[str, str]] | None = None,
    spend: dict[str, Any] | None = None,
) -> Summary:
    """The run's summary; the same records (and `spend`: what the run's ledger says it paid)
    always give the same summary.

    The cyclic GC waits meanwhile: a summary is some 100,000 new long-lived objects (a model,
    its dict and its fields-set per attempt) and no garbage cycle, and collecting while they
    pile up rescanned them and the rows again and again (half of the time at 30,000 rows)."""
    selection = select_variants(run, rows)
    if selection is not None:
        rows = selection.rows
    tasks = task_metrics(rows, ks)
    chosen = list(ks) if ks else default_ks(tasks)
    tot = totals(rows)
    load_errors = sorted(load_errors or [], key=lambda e: (e["path"], e.get("label", "")))
    estimates: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any]]] = {}
    by_task: dict[tuple[str, str, str | None], list[IndexRow]] = {}
    for row in rows:
        by_task.setdefault((row.key.dataset, row.key.task_id, row.variant), []).append(row)
    summary = {
        "schema": SUMMARY_SCHEMA,
        "run_id": run.run_id,
        "dataset": _dataset_label(run.datasets),
        "datasets": run.datasets,
        "agent": {"label": _agent_label(run.agent), "fingerprint": run.agent},
        "created_at": run.created_at,
        "finished_at": time.time(),
        "status": status,
        "narrowed": bool(run.narrowed_by or run.shard),
        "narrowed_by": run.narrowed_by,
        "agent_errors": agent_errors or [],
        "n_attempts": len(rows),
        "planned": _planned(run, status, len(rows)),
        "counts": {
            **tot.counts,
            **build_failures(rows),
            **error_classes(rows),
            **retried(rows),
            **session_counts,
            "load_error": len(load_errors),
        },
        "metrics": None if selection else _group_json(group_metrics(tasks, chosen)),
        "totals": _totals_json(tot, rows),
        "tags": {} if selection else _tags_json(tasks, chosen),
        "tasks": [
            _task_json(t, by_task[(t.dataset, t.task_id, t.variant)], estimates) for t in tasks
        ],
        "load_errors": load_errors,
        "store_problems": store_problems or [],
        "pricing": pricing_coverage(rows),
        "shard": run.shard or None,
        "environment_drift": environment_drift(rows),
        "model_cache": cache_totals(rows),
        "spend": spend,
    }
    if selection is not None:
        summary.update(_variant_parts(selection, run.agent, tasks, chosen))
    return Summary.model_validate(summary)


def _totals_json(tot: AttemptTotals, rows: Sequence[IndexRow]) -> dict[str, Any]:
    """summary.json's `totals` of these rows (`tot`: their `metrics.totals`)."""
    return {
        "mean_score": tot.mean_score,
        "input_tokens": tot.input_tokens,
        "output_tokens": tot.output_tokens,
        **spend_totals(rows),
        "duration_p50": tot.duration_p50,
        "duration_p95": tot.duration_p95,
    }


def _variant_parts(
    selection: Selection,
    fingerprint: dict[str, Any],
    tasks: list[TaskMetrics],
    ks: list[int],
) -> dict[str, Any]:
    """`variants`, `reference`, `comparison` and `not_selected`; the top-level `metrics` and
    `tags` are the one selected variant's, and absent (empty) with several: never pooled."""
    reference = selection.reference
    rows_of, tasks_of = by_variant(selection.rows), by_variant(tasks)
    parts: dict[str, Any] = {}
    sides: dict[str, Side] = {}
    for name in selection.variants:
        attempts, its_tasks = rows_of.get(name, []), tasks_of.get(name, [])
        tot = totals(attempts)
        spent = _totals_json(tot, attempts)
        parts[name] = {
            **_variant_agents(fingerprint, name, attempts),
            "counts": {**tot.counts, **error_classes(attempts), **retried(attempts)},
            "metrics": _group_json(group_metrics(its_tasks, ks)),
            "totals": spent,
            "tags": _tags_json(its_tasks, ks),
        }
        sides[name] = Side(name, its_tasks, len(attempts), tot.counts["pass"], spent["cost"])
    single = parts[reference] if len(parts) == 1 else None
    return {
        "metrics": single and single["metrics"],
        "tags": single["tags"] if single else {},
        "variants": parts,
        "reference": reference,
        "comparison": [
            comparison(side, sides[reference]) for name, side in sides.items() if name != reference
        ],
        "not_selected": selection.not_selected or None,
    }


def _tags_json(tasks: Sequence[TaskMetrics], ks: list[int]) -> dict[str, Any]:
    return {tag: _group_json(g) for tag, g in tag_metrics(tasks, ks).items()}


def _variant_label(fingerprint: dict[str, Any], name: str) -> str:
    """A variant's agent, readable: run.json's `agent.variants` label of it in each dataset
    (the same in all: once); the name when the run does not say."""
    per_dataset = (fingerprint.get("variants") or {}).values()
    labels = [str(d[name]) for d in per_dataset if isinstance(d, dict) and name in d]
    return ", ".join(dict.fromkeys(map(_readable, labels))) or name


def _variant_agents(
    fingerprint: dict[str, Any], name: str, attempts: Sequence[IndexRow]
) -> dict[str, Any]:
    """A variant's `agent`, and `agents` when its attempts were made by more than one: each
    attempt's own (the index's `variant_agent`; run.json's label for lines written before it
    was kept), counted per dataset, since two datasets may give a variant two agents."""
    stored = fingerprint.get("variants") or {}
    made: dict[str, Counter[str]] = {}
    for row in attempts:
        label = row.variant_agent
        if label is None:
            labels = stored.get(row.dataset)
            label = str(labels[name]) if isinstance(labels, dict) and name in labels else name
        made.setdefault(row.dataset, Counter())[label] += 1
    if not made:
        return {"agent": _variant_label(fingerprint, name)}
    if all(len(by_agent) == 1 for by_agent in made.values()):
        labels = [label for by_agent in made.values() for label in by_agent]
        return {"agent": ", ".join(dict.fromkeys(map(_readable, labels)))}
    agents: Counter[str] = Counter()
    for by_agent in made.values():
        for label, count in by_agent.items():
            agents[_readable(label)] += count
    return {"agent": f"mixed: {len(agents)} agents", "agents": dict(sorted(agents.items()))}


def build_failures(rows: Sequence[IndexRow]) -> dict[str, int]:
    """`build_failed`: the errors whose sandbox image could not be had, and `sandbox_error`:
    those whose sandbox failed under them, each when there are any."""
    failed = sum(1 for row in rows if row.phase == "build")
    lost = sum(1 for row in rows if row.phase == "sandbox")
    return {
        **({"build_failed": failed} if failed else {}),
        **({"sandbox_error": lost} if lost else {}),
    }


def error_classes(rows: Sequence[IndexRow]) -> dict[str, dict[str, int]]:
    """`error_classes`: the errors of `rows` by class, most first (nothing without errors)."""
    found = Counter(row.error_class for row in rows if row.error_class is not None)
    return {"error_classes": dict(found.most_common())} if found else {}


def retried(rows: Sequence[IndexRow]) -> dict[str, int]:
    """`retried`: how many of `rows` needed a retry (nothing when none did)."""
    count = sum(1 for row in rows if row.retries)
    return {"retried": count} if count else {}


def environment_drift(rows: Sequence[IndexRow]) -> list[dict[str, Any]]:
    """The captured environment names whose values differ across the attempts, with the
    distinct values sorted."""
    seen: dict[str, set[str]] = {}
    for row in rows:
        for name, value in (row.environment or {}).items():
            seen.setdefault(name, set()).add(value)
    return [
        {"name": name, "values": sorted(values)}
        for name, values in sorted(seen.items())
        if len(values) > 1
    ]


def _planned(run: RunInfo, status: str, recorded: int) -> int | None:
    """The planned attempts of a run that ended before it recorded them all."""
    return run.planned if status != "complete" and run.planned > recorded else None


def attempts_words(summary: Summary) -> str:
    """`40 attempts`, or `9 of 40 planned attempts` for a run that ended early."""
    planned = summary.planned
    if planned is None:
        return counted(summary.n_attempts, "attempt")
    return f"{summary.n_attempts} of {planned} planned attempts"


def narrowed_words(summary: Summary) -> str | None:
    """What a narrowed run holds, for every report: `narrowed by -k 'add' (6 of 39 attempts)`,
    `narrowed by shard 1/3`; None for a run of every attempt of its datasets."""
    shard = summary.shard
    parts = [part for part in (summary.narrowed_by, shard and f"shard {shard}") if part]
    return f"narrowed by {', '.join(parts)}" if parts else None


def _dataset_label(datasets: list[dict[str, str]]) -> dict[str, str]:
    return {
        "name": "+".join(d["name"] for d in datasets),
        "version": "+".join(d["version"] for d in datasets),
    }


def _agent_label(fingerprint: dict[str, Any]) -> str:
    if fingerprint.get("override"):
        label = _readable(str(fingerprint["override"]))
    else:
        manifest = (fingerprint.get("manifest") or {}).values()
        labels = [_readable(str(v)) for v in manifest if v] + _variants_label(fingerprint)
        label = ", ".join(labels) or "fixture"
    version = fingerprint.get("version")
    return f"{label} (version {version})" if version else label


def _variants_label(fingerprint: dict[str, Any]) -> list[str]:
    """`variants a, b` for a run with variants (their agents: `variants`), else nothing."""
    per_dataset = (fingerprint.get("variants") or {}).values()
    names = dict.fromkeys(name for d in per_dataset if isinstance(d, dict) for name in d)
    return [f"variants {', '.join(names)}"] if names else []


_OPTIONS_LABEL = re.compile(r"^(?P<kind>[\w.-]+):(?P<options>\{.*\})(?P<rest> \(version .*\))?$")


def _readable(label: str) -> str:
    """A `kind:{options as JSON}` label (provider and plugin agents) as `kind:model`, or the kind
    alone; the fingerprint keeps the whole spec."""
    match = _OPTIONS_LABEL.match(label)
    if match is None:
        return label
    try:
        options = json.loads(match["options"])
    except ValueError:
        return label
    model = options.get("model") if isinstance(options, dict) else None
    return f"{match['kind']}{f':{model}' if model else ''}{match['rest'] or ''}"


def _by_k(values: dict[int, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in values.items()}


def _group_json(group: GroupMetrics) -> dict[str, Any]:
    return {
        "pass_at_k": _by_k(group.pass_at_k),
        "pass_power_k": _by_k(group.pass_power_k),
        "tasks_per_k": _by_k(group.tasks_per_k),
        "n_tasks": group.n_tasks,
        "pass_at_1_stderr": group.pass_at_1_stderr,
        "pass_at_1_ci95": list(group.pass_at_1_ci95) if group.pass_at_1_ci95 else None,
    }


def _task_json(
    task: TaskMetrics,
    rows: list[IndexRow],
    estimates: dict[tuple[int, int], tuple[dict[str, Any], dict[str, Any]]],
) -> dict[str, Any]:
    """One task's entry; `estimates` shares the k-keyed dicts between tasks of equal n and c."""
    key = (task.n, task.c)
    if key not in estimates:
        estimates[key] = (_by_k(task.pass_at_k), _by_k(task.pass_power_k))
    at_k, power_k = estimates[key]
    return {
        "dataset": task.dataset,
        "task_id": task.task_id,
        "tags": list(task.tags),
        "n": task.n,
        "c": task.c,
        "errors": task.errors,
        "pass_at_k": at_k,
        "pass_power_k": power_k,
        "attempts": [
            {
                "index": r.key.attempt,
                "status": r.status,
                "duration": r.duration,
                "reason": r.reason,
            }
            for r in sorted(rows, key=lambda r: r.key.attempt)
        ],
        "variant": task.variant,
    }


def task_passes(task: TaskSummary, rule: str) -> bool:
    """The task-level success rule: `any` attempt passed, `all` did, or a pass rate >= r."""
    n, c = task.n, task.c
    if rule == "any":
        return c >= 1
    if rule == "all":
        return n > 0 and c == n
    return n > 0 and c / n >= float(rule)
