"""The end of a run, one sequence for a pytest session, `agenteval report` and `agenteval merge`:
from the run's summary the report files, the HTML report when asked, then the CI gate."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ReportError, StoreError
from .gate import GateResult, gate
from .reports import write_reports
from .summary import Summary


@dataclass(frozen=True)
class GateRule:
    """What the CI gate asks: the session's options, or `agenteval merge`'s."""

    min_pass_rate: float | None
    allow_errors: bool
    flag_prefix: str = "--agenteval-"
    """How the caller spells the options in the gate's line (`agenteval merge`: `--`)."""


@dataclass(frozen=True)
class Finished:
    """What ending the run wrote and decided."""

    summary: Summary
    """The summary as it ended: `interrupted` when a report could not be written."""
    written: list[Path] = field(default_factory=list)
    failures: list[ReportError | StoreError] = field(default_factory=list)
    """Reports that could not be written (what was written stays); the caller says why."""
    gate: GateResult | None = None
    """The gate's verdict; None when no gate was asked for."""


def finish_run(
    summary: Summary,
    *,
    out_dir: Path | None,
    task_rule: str,
    html: Callable[[Summary], Path] | None = None,
    rule: GateRule | None = None,
    exitstatus: int = 0,
    other_failures: int = 0,
) -> Finished:
    """Write summary.json, summary.md and junit.xml into `out_dir` (None: none), then the HTML
    report (`html` writes it and returns its path), then judge the run by `rule`.

    A report file that cannot be written makes the run `interrupted` in its summary (and so
    fails the gate): CI must not trust a run whose reports are missing."""
    written: list[Path] = []
    failures: list[ReportError | StoreError] = []
    if out_dir is not None:
        try:
            written += write_reports(summary, out_dir, task_rule)
        except ReportError as exc:
            failures.append(exc)
            summary = summary.model_copy(update={"status": "interrupted"})
    if html is not None:
        try:
            written.append(html(summary))
        except (ReportError, StoreError) as exc:
            failures.append(exc)
    if rule is None:
        return Finished(summary, written, failures)
    result = gate(
        summary,
        min_pass_rate=rule.min_pass_rate,
        allow_errors=rule.allow_errors,
        other_failures=other_failures,
        exitstatus=exitstatus,
        flag_prefix=rule.flag_prefix,
    )
    return Finished(summary, written, failures, result)
