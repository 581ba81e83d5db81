"""The reports of a merged run (`agenteval merge`): the summary from its stored records, the
files in its folder, and the gate `--min-pass-rate` asks for, as a session would end."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..store.merge import Merged, merge_runs
from ..store.runs import Store
from .export import skipped_lines
from .finish import GateRule, finish_run
from .gate import GateResult
from .runref import run_summary


@dataclass(frozen=True)
class MergedReport:
    written: list[Path]
    status: str
    gate: GateResult


def report_merged(
    merged: Merged,
    *,
    task_rule: str,
    pass_k: Sequence[int] | None,
    min_pass_rate: float | None,
    allow_errors: bool,
) -> MergedReport:
    """Write summary.json, summary.md and junit.xml of the merged run and judge it."""
    store = Store(merged.store_root)
    try:
        summary = run_summary(store, merged.run_id, pass_k)
        finished = finish_run(
            summary,
            out_dir=store.runs_dir / merged.run_id,
            task_rule=task_rule,
            rule=GateRule(min_pass_rate, allow_errors, flag_prefix="--"),
        )
    finally:
        store.close()
    if finished.failures:
        raise finished.failures[0]
    assert finished.gate is not None
    return MergedReport(finished.written, finished.summary.status, finished.gate)


def merge_command(args: argparse.Namespace) -> int:
    """`agenteval merge`: merge, write the reports, print what was done and the gate."""
    merged = merge_runs(args.sources, args.out, allow_drift=args.allow_drift)
    report = report_merged(
        merged,
        task_rule=args.task_rule,
        pass_k=args.pass_k,
        min_pass_rate=args.min_pass_rate,
        allow_errors=args.allow_errors,
    )
    for line in skipped_lines(merged.artifacts):
        print(line, file=sys.stderr)
    print(
        f"merged {merged.shards} shards into run {merged.run_id} "
        f"({merged.attempts} attempts, {report.status}) in {merged.store_root / 'runs'}"
    )
    for path in report.written:
        print(path)
    if report.gate.message:
        print(report.gate.message)
    return 1 if report.gate.exitstatus == 1 else 0
