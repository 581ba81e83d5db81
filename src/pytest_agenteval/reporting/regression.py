"""The regression gate's verdict: this run against a baseline run, as summary.json's
`regression` block and the lines that explain it.

It fails only when pass@1 fell by more than the allowed amount *and* the fall is significant
at 95 % (the paired bootstrap interval of `diff` lies wholly below zero), so a small noisy suite
is not failed by chance. Tasks on one side only are listed, never silently dropped.

A run with variants is compared variant by variant: each with the baseline's variant of the same
name (`VariantSummary.regression`); a variant the baseline lacks is said, never failed.
"""

from __future__ import annotations

from collections.abc import Sequence

from .diff import Change, Diff, TaskKey, change_line, compare, task_rates
from .summary import RegressionSummary, Summary, TaskMove, TaskRef, TaskSummary

SHOWN = 10


def with_regression(
    summary: Summary, baseline: Summary, ref: str, max_regression: float
) -> Summary:
    """The summary with the regression gate's verdict against `baseline` (named `ref`): the
    run's `regression`, or with variants each variant's (`variants[NAME].regression`)."""
    if summary.variants is None:
        block = regression_block(summary, baseline, ref, max_regression)
        return summary.model_copy(update={"regression": block})
    variants = {
        name: part.model_copy(
            update={"regression": variant_block(name, summary, baseline, ref, max_regression)}
        )
        for name, part in summary.variants.items()
    }
    return summary.model_copy(update={"variants": variants})


def regression_block(
    summary: Summary, baseline: Summary, ref: str, max_regression: float
) -> RegressionSummary:
    """Compare the run's tasks with the baseline's (the tasks without variant of both)."""
    return _block(
        _of(summary.tasks, None), _of(baseline.tasks, None), baseline, ref, max_regression
    )


def variant_block(
    variant: str, summary: Summary, baseline: Summary, ref: str, max_regression: float
) -> RegressionSummary:
    """One variant against the baseline's variant of the same name; a baseline without it
    gives a block that says so (`missing`) and never fails."""
    if variant not in (baseline.variants or {}):
        block = _block([], [], baseline, ref, max_regression)
        line = f"variant {variant}: the baseline has no variant of this name (not compared)"
        return block.model_copy(update={"variant": variant, "missing": True, "summary": line})
    mine, theirs = _of(summary.tasks, variant), _of(baseline.tasks, variant)
    block = _block(mine, theirs, baseline, ref, max_regression)
    return block.model_copy(update={"variant": variant})


def _of(tasks: Sequence[TaskSummary], variant: str | None) -> list[TaskSummary]:
    return [task for task in tasks if task.variant == variant]


def _block(
    new: Sequence[TaskSummary],
    base: Sequence[TaskSummary],
    baseline: Summary,
    ref: str,
    max_regression: float,
) -> RegressionSummary:
    diff = compare(task_rates(base), task_rates(new))
    change = diff.change
    return RegressionSummary(
        baseline=ref,
        baseline_run_id=baseline.run_id,
        max_regression=max_regression,
        shared_tasks=change.shared,
        base_pass_at_1=change.base,
        new_pass_at_1=change.new,
        change=change.change,
        ci95=list(change.interval) if change.interval else None,
        method=change.method,
        significant=change.significant,
        failed=fell_beyond(change, max_regression),
        summary=change_line(change),
        regressed=[TaskMove(**c.move()) for c in diff.regressed],
        improved=[TaskMove(**c.move()) for c in diff.improved],
        only_in_new=[_task(k) for k in diff.appeared],
        only_in_base=[_task(k) for k in diff.disappeared],
    )


def fell_beyond(change: Change, max_regression: float) -> bool:
    """The gate's rule: pass@1 fell by more than `max_regression` and the fall is significant
    at 95 % (the interval's upper bound is below zero)."""
    fell = change.change is not None and change.change < -max_regression
    return fell and change.fell_significantly


def diff_gate(diff: Diff, max_regression: float) -> tuple[bool, str]:
    """`agenteval diff --max-regression X`: whether the new run fails the regression gate (the
    session's `--agenteval-baseline` rule), and the line that says why."""
    change, flag = diff.change, f"--max-regression {max_regression:g}"
    if fell_beyond(change, max_regression):
        assert change.change is not None and change.interval is not None
        low, high = change.interval
        return True, (
            f"gate NOT met: pass@1 fell by {-change.change:.3f} (95 % interval {low:+.3f} to "
            f"{high:+.3f}, {change.method}), more than {flag}"
        )
    if not change.shared:
        return False, "gate met, but nothing was compared: no task is in both runs"
    if change.change is not None and change.change < -max_regression:
        return False, f"gate met: the fall is more than {flag} but not significant at 95 %"
    return False, f"gate met: no fall of more than {flag}"


def regression_problems(summary: Summary) -> list[str]:
    """Why the regression gate fails the run: the run's fall, or each variant's."""
    blocks = [summary.regression]
    blocks += [v.regression for v in (summary.variants or {}).values()]
    return [problem for problem in map(regression_problem, blocks) if problem]


def regression_problem(block: RegressionSummary | None) -> str | None:
    """Why the gate fails the run, or None."""
    if not block or not block.failed or block.ci95 is None or block.change is None:
        return None
    low, high = block.ci95
    return (
        f"{_what(block)} fell by {-block.change:.3f} against baseline {_label(block)} "
        f"(95 % interval {low:+.3f} to {high:+.3f}, {block.method}), more than "
        f"--agenteval-max-regression {block.max_regression:g}"
    )


def regression_lines(block: RegressionSummary, verbose: bool) -> list[str]:
    """The comparison for the terminal and summary.md: verdict, change, tasks that moved."""
    head = f"regression gate{_of_variant(block)} against baseline {_label(block)}"
    if block.missing:
        return [f"{head}: not compared (the baseline has no variant {block.variant})"]
    if block.failed:
        verdict = (
            f"FAILED: a fall of more than {block.max_regression:g} "
            "(--agenteval-max-regression), significant at 95 %"
        )
    elif not block.shared_tasks:
        verdict = (
            "passed, but nothing was compared: no task is in both runs "
            "(is the baseline a run of these datasets?)"
        )
    elif block.change is not None and block.change < -block.max_regression:
        verdict = "passed: the fall is not significant at 95 % (it may be noise)"
    else:
        verdict = f"passed: no fall of more than {block.max_regression:g}"
    lines = [f"{head}: {verdict}", block.summary]
    for title, entries in (
        ("regressed", block.regressed),
        ("improved", block.improved),
        ("only in this run (not compared)", block.only_in_new),
        ("only in the baseline (not compared)", block.only_in_base),
    ):
        lines += _listed(title, entries, verbose)
    return lines


def _listed(title: str, entries: Sequence[TaskRef], verbose: bool) -> list[str]:
    if not entries:
        return []
    shown = entries if verbose else entries[:SHOWN]
    rows = [f"  {_entry(e)}" for e in shown]
    more = len(entries) - len(shown)
    tail = [f"  … {more} more (-v shows all)"] if more else []
    return [f"{title}: {len(entries)}", *rows, *tail]


def _entry(entry: TaskRef) -> str:
    name = f"{entry.dataset}::{entry.task_id}"
    return f"{name}: {entry.base} → {entry.new}" if isinstance(entry, TaskMove) else name


def _task(key: TaskKey) -> TaskRef:
    return TaskRef(dataset=key[0], task_id=key[1])


def _what(block: RegressionSummary) -> str:
    return f"pass@1 of variant {block.variant}" if block.variant else "pass@1"


def _of_variant(block: RegressionSummary) -> str:
    return f" of variant {block.variant}" if block.variant else ""


def _label(block: RegressionSummary) -> str:
    run_id = block.baseline_run_id
    ref = block.baseline
    return ref if not run_id or run_id == ref else f"{ref} (run {run_id})"
