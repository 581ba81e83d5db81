"""The work of `agenteval show`, `export` and `diff` on an opened store; `cli` only parses the
command line and prints."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ..core.options import rate
from ..store.artifacts import attempt_folder
from ..store.locate import cache_dir, find_rootdir
from ..store.runs import Store
from .diff import Diff, compare, diff_lines, task_rates
from .export import WRITERS, attempt_row, write_artifacts
from .regression import diff_gate
from .runref import load_summary, resolve_run, stored_run
from .show import (
    ShowError,
    artifact_lines,
    attempt_lines,
    earlier_sessions_end,
    reuse_of,
    run_lines,
    split_target,
    task_lines,
)


def show(store: Store, ref: str, target: str | None, full: bool = False) -> list[str]:
    """The run, one of its tasks, or one attempt (long texts cut unless `full`), as lines."""
    info, rows = stored_run(store, resolve_run(store, ref))
    if target is None:
        return run_lines(info, rows)
    task_id, attempt = split_target(target, {r.task_id for r in rows})
    if attempt is None:
        return task_lines(task_id, rows, info.run_id)
    keys = sorted(r.key for r in rows if r.task_id == task_id)
    key = next((k for k in keys if k[2] == attempt), None)
    if key is None:
        have = ", ".join(str(k[2]) for k in keys)
        raise ShowError(f"task {task_id!r} has no attempt {attempt}; it has {have}")
    record = store.record(info.run_id, key)
    if record is None:
        raise ShowError(
            f"the stored record of {task_id}/{attempt} cannot be read "
            f"(`agenteval repair {info.run_id}` checks the run)"
        )
    lines = attempt_lines(record, reuse_of(record, earlier_sessions_end(info)), full)
    return lines + artifact_lines(record, attempt_folder(store.runs_dir / info.run_id, key))


def export(
    store: Store, ref: str, fmt: str, out: TextIO, artifacts: Path | None = None
) -> tuple[int, int]:
    """Write every stored attempt of the run as `fmt` to `out`, and its kept artifacts below
    `artifacts` when given; returns how many attempts and artifact files."""
    info, _ = stored_run(store, resolve_run(store, ref))
    since = earlier_sessions_end(info)
    records = sorted(store.records(info.run_id), key=lambda r: r.key)
    count = WRITERS[fmt]((attempt_row(r, since) for r in records), out)
    if artifacts is None:
        return count, 0
    return count, write_artifacts(store.runs_dir / info.run_id, records, artifacts)


def diff(store: Store | None, base: str, new: str, cwd: Path) -> Diff:
    """Compare two runs (run ids, run folders or summary.json files)."""
    before = load_summary(base, store, cwd)
    after = load_summary(new, store, cwd)
    return compare(task_rates(before.tasks), task_rates(after.tasks))


@contextlib.contextmanager
def output(path: Path | None, stdout: TextIO) -> Iterator[TextIO]:
    """`path` opened for writing (newline untranslated, as csv wants), else stdout."""
    if path is None:
        yield stdout
        return
    with path.open("w", encoding="utf-8", newline="") as f:
        yield f


# --- the command line ------------------------------------------------------------------------

OpenStore = Callable[[argparse.Namespace], Store | None]


def register(
    sub: Any, cache_option: Callable[[argparse.ArgumentParser], None], open_store: OpenStore
) -> None:
    """Add show, export and diff to the `agenteval` command's subparsers."""
    run_help = "a run id or its start, or `latest` (the most recently used run)"
    shown = sub.add_parser("show", help="a run's tasks, a task's attempts, or one attempt")
    shown.add_argument("run_id", metavar="RUN", help=run_help)
    shown.add_argument(
        "target", nargs="?", metavar="TASK_ID[/ATTEMPT]", help="a task, or one of its attempts"
    )
    shown.add_argument(
        "--full",
        action="store_true",
        help="an attempt's input, expected answer and judge prompts and replies in full "
        "(default: cut to 1000 characters each)",
    )
    cache_option(shown)
    shown.set_defaults(command=lambda args: _show(args, open_store))

    exported = sub.add_parser("export", help="one row per attempt as CSV or JSON Lines")
    exported.add_argument("run_id", metavar="RUN", help=run_help)
    exported.add_argument(
        "--format", choices=sorted(WRITERS), default="csv", help="csv (default) or jsonl"
    )
    exported.add_argument("--out", type=Path, help="the file to write (default: stdout)")
    exported.add_argument(
        "--artifacts",
        type=Path,
        metavar="DIR",
        help="also copy each attempt's kept artifacts into DIR/<dataset>/<task>[attempt-N]/",
    )
    cache_option(exported)
    exported.set_defaults(command=lambda args: _export(args, open_store))

    compared = sub.add_parser(
        "diff", help="tasks that regressed or improved, and pass@1's change with its interval"
    )
    for name in ("base", "new"):
        compared.add_argument(
            name, metavar=name.upper(), help="a run id, `latest`, a run folder or a summary.json"
        )
    compared.add_argument(
        "--max-regression",
        type=rate,
        metavar="X",
        help="gate: exit 1 when pass@1 fell by more than X and the fall is significant at 95 %% "
        "(as --agenteval-baseline's gate; 0: any significant fall)",
    )
    cache_option(compared)
    compared.set_defaults(command=_diff)


def _show(args: argparse.Namespace, open_store: OpenStore) -> int:
    store = open_store(args)
    if store is None:
        return 1
    print("\n".join(show(store, args.run_id, args.target, args.full)))
    return 0


def _export(args: argparse.Namespace, open_store: OpenStore) -> int:
    store = open_store(args)
    if store is None:
        return 1
    with output(args.out, sys.stdout) as out:
        count, files = export(store, args.run_id, args.format, out, args.artifacts)
    if args.out:
        print(f"{count} attempts written to {args.out}", file=sys.stderr)
    if args.artifacts:
        print(f"{files} artifact files written below {args.artifacts}", file=sys.stderr)
    return 0


def _diff(args: argparse.Namespace) -> int:
    """Runs named by id are looked up in the store, when there is one; files need none."""
    root = (args.cache_dir or cache_dir(args.rootdir or find_rootdir(Path.cwd()))) / "agenteval"
    store = Store(root) if (root / "runs").is_dir() else None
    compared = diff(store, args.base, args.new, Path.cwd())
    print("\n".join(diff_lines(compared)))
    if args.max_regression is None:
        return 0
    failed, line = diff_gate(compared, args.max_regression)
    print(line)
    return 1 if failed else 0
