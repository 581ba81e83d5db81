"""The `agenteval` command: list stored runs, re-render reports, validate datasets, schemas."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .core import options


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    return int(args.command(args) or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenteval", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pytest-agenteval {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    def cache_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--cache-dir",
            type=Path,
            default=Path(".pytest_cache"),
            help="the pytest cache dir holding the runs (default: .pytest_cache)",
        )

    runs = sub.add_parser("runs", help="list stored runs, newest first")
    cache_option(runs)
    runs.set_defaults(command=_runs)

    report = sub.add_parser("report", help="re-render summary.json/md and junit.xml of a run")
    report.add_argument("run_id", metavar="RUN_ID")
    report.add_argument("--out", type=Path, help="output folder (default: the run's folder)")
    report.add_argument(
        "--task-rule",
        default="any",
        type=options.task_rule,
        help="any, all, or a pass rate like 0.6",
    )
    report.add_argument(
        "--pass-k", type=options.pass_ks, help="k values, e.g. 1,5,10 (default: 1..attempts)"
    )
    cache_option(report)
    report.set_defaults(command=_report)

    validate = sub.add_parser("validate", help="load datasets and report every problem")
    validate.add_argument("datasets", nargs="+", type=Path, metavar="DATASET")
    validate.set_defaults(command=_validate)

    schema = sub.add_parser("schema", help="print the JSON Schema of a file format")
    schema.add_argument("kind", choices=["task", "manifest", "record", "summary"])
    schema.set_defaults(command=_schema)
    return parser


def _open_store(cache_dir: Path):  # type: ignore[no-untyped-def]
    from .store.runs import Store

    root = cache_dir / "agenteval"
    if not (root / "runs").is_dir():
        print(f"agenteval: no runs stored in {root}", file=sys.stderr)
        return None
    return Store(root)


def _runs(args: argparse.Namespace) -> int:
    store = _open_store(args.cache_dir)
    if store is None:
        return 1
    runs = store.runs()
    for problem in store.problems:
        print(f"agenteval: skipped a run: {problem}", file=sys.stderr)
    print(f"{'run':10} {'dataset':24} {'started':19} {'done/planned':>13}  status")
    for run in runs:
        names = "+".join(d["name"] for d in run.datasets)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created_at))
        print(
            f"{run.run_id:10} {names:24} {started:19} {run.done:>6}/{run.planned:<6}  {run.status}"
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    from .core.errors import StoreError
    from .reporting.reports import write_reports
    from .reporting.summary import build_summary

    store = _open_store(args.cache_dir)
    if store is None:
        return 1
    try:
        run = store.run(args.run_id, count=True)
    except StoreError as exc:
        print(f"agenteval: {exc}", file=sys.stderr)
        return 1
    if run is None:
        print(f"agenteval: no run {args.run_id!r} (see `agenteval runs`)", file=sys.stderr)
        return 1
    rows, bad = store.index(run.run_id, for_plan=False)
    for item in bad:
        print(f"agenteval: unreadable record at {item.where}: {item.problem}", file=sys.stderr)
    last = run.sessions[-1]["counts"] if run.sessions else {}
    summary = build_summary(run, rows, ks=args.pass_k, session_counts=last, status=run.status)
    out = args.out or args.cache_dir / "agenteval" / "runs" / run.run_id
    for path in write_reports(summary, out, args.task_rule):
        print(path)
    return 0


def _validate(args: argparse.Namespace) -> int:
    """Load each dataset; then collect them as `pytest --co` would (conftest plugins included)
    and build every grader and every task's agent, starting nothing."""
    from .core.errors import TaskFileError
    from .sources.dataset import load_dataset

    problems, roots = 0, []
    for root in args.datasets:
        try:
            load_dataset(root)
        except TaskFileError as exc:
            print(exc.render())
            problems += 1
            continue
        roots.append(root)
    tasks = 0
    if roots:
        from .glue.validate import validate  # imports pytest

        lines, tasks, found = validate(roots)
        for line in lines:
            print(line)
        problems += found
    print(f"{tasks} tasks valid, {problems} problems")
    return 1 if problems else 0


def _schema(args: argparse.Namespace) -> int:
    from .core.model import Manifest, TaskSpec
    from .core.records import record_schema
    from .reporting.summary import Summary

    if args.kind == "record":
        schema = record_schema()
    else:
        model = {"task": TaskSpec, "manifest": Manifest, "summary": Summary}[args.kind]
        schema = model.model_json_schema(by_alias=True)
    print(json.dumps(schema, indent=2))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
