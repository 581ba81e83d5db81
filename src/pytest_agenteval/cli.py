"""The `agenteval` command: list, repair and re-render stored runs, validate datasets, schemas.

Problems are one line each on stderr (`agenteval: ...`, exit 1), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .core import options
from .core.errors import AgentevalError
from .core.text import counted, printable
from .core.version import __version__

if TYPE_CHECKING:
    from .reporting.summary import Summary
    from .store.runs import Store

SIGPIPE_EXIT = 141
"""What a shell reports for a program its reader stopped early (`agenteval runs | head`)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "command", None):
            parser.print_help()
            return 2
        code = int(args.command(args) or 0)
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    except (AgentevalError, OSError) as exc:
        print(f"agenteval: {exc}", file=sys.stderr)
        return 1
    return code


def _reader_gone() -> int:
    """Stop quietly when the reader of stdout went away, as `git log | head` does; what is
    still buffered goes to /dev/null so that exiting does not fail on it again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_EXIT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenteval", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pytest-agenteval {__version__}")
    sub = parser.add_subparsers(metavar="COMMAND")

    def cache_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--rootdir",
            type=Path,
            help="the project's pytest rootdir (default: the nearest folder with a pytest "
            "config file, from the current one upwards, as pytest finds it)",
        )
        p.add_argument(
            "--cache-dir",
            type=Path,
            help="the pytest cache dir holding the runs (default: the rootdir's cache_dir "
            "setting, else ROOTDIR/.pytest_cache)",
        )

    runs = sub.add_parser("runs", help="list stored runs, newest first")
    cache_option(runs)
    runs.set_defaults(command=_runs)

    report = sub.add_parser("report", help="re-render summary.json/md and junit.xml of a run")
    report.add_argument(
        "run_id", metavar="RUN_ID", help="a run id, its first characters, or `latest`"
    )
    report.add_argument("--out", type=Path, help="output folder (default: the run's folder)")
    report.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="write the self-contained HTML report to FILE (then the other files only with --out)",
    )
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

    repair = sub.add_parser(
        "repair",
        help="check a run's stored attempts; rebuild its run.json if damaged or lost; "
        "remove the Docker sandboxes of sessions that are gone",
    )
    repair.add_argument(
        "run_id", metavar="RUN_ID", help="a run id, its first characters, or `latest`"
    )
    cache_option(repair)
    repair.set_defaults(command=_repair)

    cancel = sub.add_parser(
        "cancel", help="stop a running run: no new attempt starts; those in flight finish"
    )
    cancel.add_argument(
        "run_id",
        nargs="?",
        metavar="RUN_ID",
        help="a run id, its start, or `latest` (default: the most recently used run that is "
        "running)",
    )
    cache_option(cancel)
    cancel.set_defaults(command=_cancel)

    status = sub.add_parser("status", help="show a run's live progress (its progress.json)")
    status.add_argument(
        "run_id",
        nargs="?",
        metavar="RUN_ID",
        help="a run id, its start, or `latest` (default: the most recently used run)",
    )
    status.add_argument(
        "--watch", action="store_true", help="print it again every second until the run ends"
    )
    cache_option(status)
    status.set_defaults(command=_status)

    from .reporting.commands import register

    register(sub, cache_option, _open_store)  # show, export, diff

    merge = sub.add_parser(
        "merge", help="merge the runs of a suite's shards (--agenteval-shard) into one run"
    )
    merge.add_argument(
        "sources", nargs="+", type=Path, metavar="SRC", help="a shard's run folder or cache dir"
    )
    merge.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="the cache dir to write the merged run into",
    )
    merge.add_argument(
        "--min-pass-rate", type=options.rate, metavar="X", help="exit 1 when pass@1 < X"
    )
    merge.add_argument("--allow-errors", action="store_true", help="errors do not fail the gate")
    merge.add_argument(
        "--allow-drift", action="store_true", help="merge shards of other agents or versions"
    )
    merge.add_argument(
        "--task-rule",
        default="any",
        type=options.task_rule,
        metavar="RULE",
        help="any, all, or a pass rate like 0.6, for the per-task junit.xml",
    )
    merge.add_argument(
        "--pass-k",
        type=options.pass_ks,
        metavar="K,K,...",
        help="k values, e.g. 1,5,10 (default: 1..attempts)",
    )
    merge.set_defaults(command=_merge)

    validate = sub.add_parser("validate", help="load datasets and report every problem")
    validate.add_argument(
        "datasets", nargs="+", type=Path, metavar="DATASET", help="a dataset folder (or part)"
    )
    validate.set_defaults(command=_validate)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of a file format (task and manifest: as users write them)",
    )
    schema.add_argument(
        "kind",
        choices=["task", "manifest", "record", "summary", "progress"],
        help="task files and manifests as users write them; records, summary.json and "
        "progress.json as written",
    )
    schema.set_defaults(command=_schema)

    cache = sub.add_parser(
        "cache", help="the model-call cache (--agenteval-model-cache): stats, prune, clear"
    )
    actions = cache.add_subparsers(metavar="ACTION")
    stats = actions.add_parser("stats", help="how many cached answers, how large, how old")
    cache_option(stats)
    stats.set_defaults(command=_cache_stats)
    prune = actions.add_parser("prune", help="remove cached answers older than an age")
    prune.add_argument(
        "--older-than",
        type=options.age,
        required=True,
        metavar="AGE",
        help="remove answers written longer ago than this: 30d, 12h, 90m, 45s",
    )
    cache_option(prune)
    prune.set_defaults(command=_cache_prune)
    clear = actions.add_parser("clear", help="remove every cached answer")
    cache_option(clear)
    clear.set_defaults(command=_cache_clear)
    cache.set_defaults(command=lambda _: _usage(cache))
    return parser


def _open_store(args: argparse.Namespace) -> Store | None:
    from .store.locate import cache_dir, find_rootdir
    from .store.runs import Store

    folder = args.cache_dir or cache_dir(args.rootdir or find_rootdir(Path.cwd()))
    root = folder / "agenteval"
    if not (root / "runs").is_dir():
        print(f"agenteval: no runs stored in {root}", file=sys.stderr)
        return None
    return Store(root)


def _print_damage(store: Store) -> None:
    for problem in store.problems:
        print(printable(f"agenteval: store damage: {problem}"), file=sys.stderr)


def _runs(args: argparse.Namespace) -> int:
    store = _open_store(args)
    if store is None:
        return 1
    runs = store.runs()
    _print_damage(store)
    # most recently used first, as `latest` picks: the column says when each was last used
    print(f"{'run':10} {'dataset':24} {'last used':19} {'done/planned':>13}  status")
    for run in runs:
        names = "+".join(d["name"] for d in run.datasets)
        used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.updated_at))
        narrowed = f", narrowed by {run.narrowed_by}" if run.narrowed_by else ""
        narrowed += f", shard {run.shard}" if run.shard else ""
        narrowed += f", merged from {len(run.merged_from)} shards" if run.merged_from else ""
        if run.status == "interrupted" and not run.planned:
            narrowed += " (died before planning; --resume-suite starts it over)"
        print(
            f"{run.run_id:10} {names:24} {used:19} {run.done:>6}/{run.planned:<6}  "
            f"{run.status}{narrowed}"
            + (f" (died running {run.died_running})" if run.died_running else "")
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    from .core.errors import ReportError
    from .reporting.finish import finish_run
    from .reporting.runref import resolve_run, run_summary

    store = _open_store(args)
    if store is None:
        return 1
    run_id = resolve_run(store, args.run_id)
    summary = run_summary(store, run_id, args.pass_k)  # a run that is not there: RunRefError
    _print_damage(store)

    def html_page(summary: Summary) -> Path:
        from .reporting.html import attempt_details, write_html

        return write_html(summary, attempt_details(store, run_id), args.html)

    known = len(store.problems)
    out_dir = args.out if args.html else args.out or store.runs_dir / run_id
    html = html_page if args.html else None
    finished = finish_run(summary, out_dir=out_dir, task_rule=args.task_rule, html=html)
    for problem in store.problems[known:]:  # found while reading the full records
        print(printable(f"agenteval: store damage: {problem}"), file=sys.stderr)
    if finished.failures:
        exc = finished.failures[0]
        hint = "; write them elsewhere with --out DIR" if out_dir and not args.out else ""
        raise ReportError(f"{exc}{hint}") if isinstance(exc, ReportError) else exc from None
    for path in finished.written:
        print(path)
    return 0


def _repair(args: argparse.Namespace) -> int:
    from .reporting.runref import resolve_run
    from .store.repair import repair_run

    store = _open_store(args)
    if store is None:
        return 1
    run_id = resolve_run(store, args.run_id)
    repair = repair_run(store, run_id)
    for line in repair.done:
        print(f"run {run_id}: {line}")
    for problem in repair.damage:
        print(f"damage left as it is: {problem}")
    swept = _sweep_sandboxes()
    if swept:
        print(swept)
    return 0


def _sweep_sandboxes() -> str | None:
    """`repair` also removes the sandboxes of this host's sessions that are gone, of every
    kind it knows (Docker's, where a docker command is installed, and the installed kinds'
    of the entry point group `pytest_agenteval.environment_kinds`), and says how many."""
    from .execution.kinds import KindError, installed_kinds, registry
    from .execution.sandboxes import EnvironmentUnavailable

    try:
        kinds = registry(installed_kinds())
    except KindError as exc:
        return f"sandboxes not checked: {exc.message}"
    if shutil.which("docker") is None:
        del kinds["docker"]
    lines = []
    for name, kind in kinds.items():
        try:
            lines += kind.sweep(None)
        except EnvironmentUnavailable as exc:
            lines.append(f"{name} sandboxes not checked: {exc.message}")
    if not kinds:
        return None
    return "\n".join(lines) or "no sandbox container of a gone session left"


def _cancel(args: argparse.Namespace) -> int:
    from .store.stops import request_cancel

    store = _open_store(args)
    if store is None:
        return 1
    running = [r.run_id for r in store.runs() if r.status == "running"]
    run_id = _chosen_run(
        store, args.run_id, running, "no run is running (name one: agenteval cancel RUN_ID)"
    )
    if run_id is None:
        return 1
    info = store.run(run_id)
    if info is not None and info.status != "running":
        print(
            f"agenteval: run {run_id} is not running ({info.status}); nothing to cancel",
            file=sys.stderr,
        )
        return 1
    request_cancel(store.runs_dir / run_id)
    print(
        f"run {run_id}: cancel requested; attempts in flight finish, the rest are skipped "
        "(--resume-suite runs them)"
    )
    return 0


def _chosen_run(store: Store, given: str | None, default: list[str], none: str) -> str | None:
    """The run the user named (a unique prefix will do), else the first of `default`; None,
    with a line on stderr, when there is none."""
    from .reporting.runref import resolve_run

    if given:
        return resolve_run(store, given)
    if not default:
        print(f"agenteval: {none}", file=sys.stderr)
        return None
    return default[0]


def _status(args: argparse.Namespace) -> int:
    store = _open_store(args)
    if store is None:
        return 1
    newest = [r.run_id for r in store.runs()]
    run_id = _chosen_run(store, args.run_id, newest, "no run stored yet")
    if run_id is None:
        return 1
    while True:
        lines, live, readable = _status_lines(store, run_id)
        print("\n".join(lines), file=sys.stdout if readable else sys.stderr, flush=True)
        if not args.watch or not live:
            return 0 if readable else 1
        try:
            time.sleep(1.0)
        except KeyboardInterrupt:
            return 0
        print()


def _status_lines(store: Store, run_id: str) -> tuple[list[str], bool, bool]:
    """What `agenteval status` prints of a run now, whether a session of it is live (or
    starting: `--watch` goes on), and whether its progress.json was readable."""
    from .core.errors import StoreError
    from .store.progress import LIVE, progress_lines, read_progress, stale_lines, writer_alive

    locked = store.running(run_id)
    try:
        data = read_progress(store.runs_dir / run_id)
    except StoreError as exc:
        return [f"agenteval: {exc}", _holds(store, run_id)], locked, False
    if data is None:
        if locked:
            return [f"run {run_id}: a session is starting (no progress.json yet)"], True, True
        none = f"agenteval: run {run_id} has no progress.json: no session of it got to planning"
        return [none, _holds(store, run_id)], False, False
    alive = writer_alive(data)
    last = f"{data['status']} · {data['done']}/{data['planned']} done"
    starting = f"run {run_id}: a new session is starting; the last one"
    if data["status"] not in LIVE:
        if locked and alive is not True:  # the writer is done: the lock is a new session's
            return [f"{starting} ended {last}"], True, True
        return progress_lines(data), False, True
    if locked and alive is not False:
        return progress_lines(data), True, True
    if locked:
        return [f"{starting} died at {last}"], True, True
    try:
        info = store.run(run_id)
        rows, _ = store.index(run_id, for_plan=False)  # damage: in store.problems
    except StoreError as exc:
        pid = (data.get("session") or {}).get("pid", "?")
        stale = f"stale: the session that wrote this (pid {pid}) is gone; {_holds(store, run_id)}"
        return [*progress_lines(data), stale, f"agenteval: {exc}"], False, True
    status = info.status if info else "interrupted"
    planned = info.planned if info else data["planned"]
    return stale_lines(data, rows, planned, status), False, True


def _holds(store: Store, run_id: str) -> str:
    """What the run's store holds, for when its progress.json cannot say."""
    from .core.errors import StoreError

    try:
        info = store.run(run_id, count=True)
    except StoreError as exc:
        return f"its records cannot be counted: {exc}"
    if info is None:
        return "its run.json cannot be read (`agenteval repair`)"
    return f"the run holds {info.done} of {info.planned} planned attempts ({info.status})"


def _merge(args: argparse.Namespace) -> int:
    from .reporting.merged import merge_command

    return merge_command(args)


def _validate(args: argparse.Namespace) -> int:
    """Load each dataset; then collect them as `pytest --co` would (conftest plugins included)
    and build every grader and every task's agent, starting nothing."""
    from .core.errors import TaskFileError, TaskFileErrors
    from .sources.dataset import load_dataset

    problems, roots = 0, []
    for root in args.datasets:
        try:
            load_dataset(root)
        except TaskFileError as exc:
            print(exc.render())
            problems += len(exc.errors) if isinstance(exc, TaskFileErrors) else 1
            continue
        roots.append(root)
    tasks = 0
    if roots:
        from .glue.validate import validate  # imports pytest

        lines, tasks, found = validate(roots)
        for line in lines:
            print(line)
        problems += found
    print(f"{counted(tasks, 'task')} valid, {counted(problems, 'problem')}")
    return 1 if problems else 0


def _schema(args: argparse.Namespace) -> int:
    from .reporting import schemas

    if args.kind == "task":
        schema = schemas.task_file_schema()
    elif args.kind == "manifest":
        schema = schemas.manifest_schema()
    elif args.kind == "record":
        from .core.docstrings import describe
        from .core.records import AttemptRecord, record_schema

        schema = record_schema()
        defs = schema.pop("$defs", {})
        describe(schema, defs, AttemptRecord)
        schema = schemas.finish({**schema, "title": "pytest-agenteval attempt record"}, defs)
    elif args.kind == "progress":
        from .store.progress import ProgressFile

        schema = schemas.model_schema(ProgressFile, "pytest-agenteval progress.json")
    else:
        from .reporting.summary import Summary

        schema = schemas.model_schema(Summary, "pytest-agenteval summary.json")
    print(json.dumps(schema, indent=2, ensure_ascii=False))
    return 0


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _model_cache(args: argparse.Namespace) -> Path:
    from .providers.cache import FOLDER
    from .store.locate import cache_dir, find_rootdir

    return (args.cache_dir or cache_dir(args.rootdir or find_rootdir(Path.cwd()))) / FOLDER


def _cache_stats(args: argparse.Namespace) -> int:
    from .providers.cache import stats

    folder = _model_cache(args)
    found = stats(folder)
    print(f"model cache: {folder}")
    print(f"{counted(found.entries, 'cached answer')}, {found.bytes / 1e6:.1f} MB")
    if found.oldest is not None and found.newest is not None:
        when = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
            for t in (found.oldest, found.newest)
        )
        print("written from {} to {}".format(*when))
    print(f"first cost: ${found.cost:.4f} (what they cost when asked; a hit costs $0)")
    return 0


def _cache_prune(args: argparse.Namespace) -> int:
    from .providers.cache import prune

    removed = prune(_model_cache(args), args.older_than)
    print(f"removed {counted(removed, 'cached answer')}")
    return 0


def _cache_clear(args: argparse.Namespace) -> int:
    from .providers.cache import clear

    removed = clear(_model_cache(args))
    print(f"removed {counted(removed, 'cached answer')}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
