"""The CI gate: from a run's summary, the session's exit status and the line that explains it.

A gate never passes what was not evaluated: an incomplete run, a task file that could not be
loaded, or (unless allowed) an attempt that errored fails it, whatever pass@1 says. A run with
variants meets `min_pass_rate` only if every selected variant does (their numbers are never
pooled), and the line names the variants that did not.
"""

from __future__ import annotations

from dataclasses import dataclass

from .regression import regression_problems
from .summary import Summary

OK, FAILED = 0, 1


@dataclass(frozen=True)
class GateResult:
    exitstatus: int | None
    """The session's new exit status; None leaves pytest's."""
    message: str | None = None


def gate(
    summary: Summary,
    *,
    min_pass_rate: float | None,
    allow_errors: bool,
    other_failures: int,
    exitstatus: int,
    flag_prefix: str = "--agenteval-",
) -> GateResult:
    """Decide the exit status. Without `min_pass_rate` pytest's own status stands, except
    that `allow_errors` turns a run whose only problems are errored attempts into a pass, and
    that a significant fall against the baseline (summary's `regression`) fails it.
    `flag_prefix` names the options in the message as the caller spells them (`agenteval
    merge` takes `--allow-errors` and `--min-pass-rate`)."""
    problems = _problems(summary, allow_errors, other_failures, flag_prefix)
    falls = regression_problems(summary)
    keep = None if exitstatus not in (OK, FAILED) else FAILED
    if min_pass_rate is None:
        if falls:
            return GateResult(keep, "gate NOT met: " + "; ".join(falls))
        counts = summary.counts
        if allow_errors and (counts.build_failed or counts.sandbox_error):  # not allowed: say so
            return GateResult(keep, "gate NOT met: " + "; ".join(problems))
        only_errors = exitstatus == FAILED and not summary.counts.fail and not problems
        return GateResult(OK if allow_errors and only_errors else None)
    rates = pass_rates(summary)
    below = {name: rate for name, rate in rates.items() if rate < min_pass_rate}
    if below:
        problems.insert(0, f"{_rates_text(below)} {_is(below)} below {min_pass_rate:g}")
    elif problems or falls:
        problems.append(f"{_rates_text(rates)} alone would meet {min_pass_rate:g}")
    problems[:0] = falls
    if problems:
        return GateResult(keep, "gate NOT met: " + "; ".join(problems))
    met = f"gate met: {_rates_text(rates)} >= {min_pass_rate:g} ({flag_prefix}min-pass-rate)"
    return GateResult(None if keep is None else OK, met)


def pass_rates(summary: Summary) -> dict[str | None, float]:
    """pass@1 the gate holds to `min_pass_rate`: the run's (key None), or each selected
    variant's; a value nobody recorded is 0."""
    if summary.variants is not None:
        parts = summary.variants.items()
        return {name: part.metrics.pass_at_k.get("1") or 0.0 for name, part in parts}
    metrics = summary.metrics
    return {None: (metrics.pass_at_k.get("1") or 0.0) if metrics else 0.0}


def _rates_text(rates: dict[str | None, float]) -> str:
    """`pass@1 0.500`, or per variant `pass@1 of variant b 0.500, of variant c 0.250`."""
    if list(rates) == [None]:
        return f"pass@1 {rates[None]:.3f}"
    return "pass@1 " + ", ".join(f"of variant {name} {rate:.3f}" for name, rate in rates.items())


def _is(rates: dict[str | None, float]) -> str:
    return "is" if len(rates) == 1 else "are"


def _problems(
    summary: Summary, allow_errors: bool, other_failures: int, flag_prefix: str
) -> list[str]:
    problems = []
    if summary.status != "complete":
        status = summary.status
        state = status if status in ("interrupted", "cancelled") else f"stopped ({status})"
        problems.append(f"the run is {state}: not every planned attempt finished")
    not_run = sum(e.attempts for e in summary.agent_errors)
    if not_run:
        problems.append(f"{not_run} attempt(s) not run: their agent cannot be built")
    loads = len(summary.load_errors)
    if loads:
        problems.append(f"{loads} task(s) could not be loaded")
    built = summary.counts.build_failed
    if built:  # nothing was evaluated: allowing errors does not allow these
        problems.append(f"{built} attempt(s) could not build or pull their sandbox image")
    lost = summary.counts.sandbox_error
    if lost:  # nor these: their sandbox failed under them (--resume-suite runs them again)
        problems.append(f"{lost} attempt(s) lost their sandbox (its Docker daemon or CLI failed)")
    errors = summary.counts.error
    if errors and not allow_errors:
        problems.append(f"{errors} attempt(s) errored ({flag_prefix}allow-errors accepts them)")
    if other_failures:
        problems.append(f"{other_failures} other test(s) failed")
    return problems
