"""The work of `agenteval show`, `export` and `diff` on an opened store; `cli` only parses the
command line and prints."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ..core.identity import AttemptId
from ..core.options import rate
from ..core.text import printable
from ..store.artifacts import Copied
from ..store.locate import cache_dir, find_rootdir
from ..store.runs import Store
from .diff import (
    Diff,
    TaskKey,
    TaskRate,
    compare,
    diff_lines,
    summary_variants,
    task_rates,
    variant_rates,
)
from .export import WRITERS, attempt_row, columns, skipped_lines, write_artifacts
from .regression import diff_gate
from .runref import load_summary, resolve_run, stored_run
from .show import (
    ShowError,
    artifact_lines,
    attempt_lines,
    check_variant,
    earlier_sessions_end,
    in_order,
    reuse_of,
    run_lines,
    split_target,
    task_lines,
    variant_names,
)
from .summary import Summary


def show(
    store: Store, ref: str, target: str | None, full: bool = False, variant: str | None = None
) -> list[str]:
    """The run, one of its tasks, or one attempt (long texts cut unless `full`), as lines;
    `variant` keeps to that variant's attempts (a run with variants)."""
    info, rows = stored_run(store, resolve_run(store, ref))
    variants = variant_names(info, rows)
    if variant is not None:
        check_variant(variant, variants, info.run_id)
    if target is None:
        return run_lines(info, [r for r in rows if variant in (None, r.variant)])
    try:
        task_id, named, attempt = split_target(target, {r.task_id for r in rows}, variants)
    except ShowError as exc:  # say which run was looked in (`latest` moves)
        datasets = "+".join(d["name"] for d in info.datasets)
        raise ShowError(f"{exc} (run {info.run_id} of dataset {datasets})") from None
    if named is not None and variant is not None and named != variant:
        raise ShowError(f"{target!r} names variant {named!r} but --variant says {variant!r}")
    chosen = named or variant
    mine = [r for r in rows if r.task_id == task_id and chosen in (None, r.variant)]
    if not mine:
        raise ShowError(f"task {task_id!r} has no attempt of variant {chosen!r}")
    if attempt is None:
        return task_lines(task_id, mine, info.run_id, variants)
    keys = [r.key for r in sorted(mine, key=in_order(variants)) if r.key.attempt == attempt]
    if not keys:
        have = ", ".join(str(n) for n in sorted({r.key.attempt for r in mine}))
        raise ShowError(f"task {task_id!r} has no attempt {attempt}; it has {have}")
    if len(keys) > 1:
        raise ShowError(_which_variant(info.run_id, task_id, attempt, keys))
    record = store.record(info.run_id, keys[0])
    if record is None:
        raise ShowError(
            f"the stored record of {task_id}/{attempt} cannot be read "
            f"(`agenteval repair {info.run_id}` checks the run)"
        )
    lines = attempt_lines(record, reuse_of(record, earlier_sessions_end(info)), full)
    return lines + artifact_lines(record, store.runs_dir / info.run_id)


def _which_variant(run_id: str, task_id: str, attempt: int, keys: list[AttemptId]) -> str:
    """An attempt several variants ran: which to choose, and how to write it."""
    names = [key.variant or "-" for key in keys]
    return (
        f"task {task_id!r} attempt {attempt} ran in {len(keys)} variants: {', '.join(names)}; "
        f"choose one: agenteval show {run_id} {task_id}/{attempt} --variant NAME "
        f"(or {task_id}/NAME/{attempt})"
    )


def export(
    store: Store,
    ref: str,
    fmt: str,
    out: TextIO,
    variant: str | None = None,
    artifacts: Path | None = None,
) -> tuple[int, Copied]:
    """Write every stored attempt of the run (of `variant` only, when given) as `fmt` to
    `out`, with a `variant` column when the run has variants, and its kept artifacts below
    `artifacts` when given; returns how many attempts, and the artifact files copied."""
    info, rows = stored_run(store, resolve_run(store, ref))
    variants = variant_names(info, rows)
    if variant is not None:
        check_variant(variant, variants, info.run_id)
    since = earlier_sessions_end(info)
    records = sorted(
        (r for r in store.records(info.run_id) if variant is None or r.variant == variant),
        key=in_order(variants),
    )
    count = WRITERS[fmt](
        (attempt_row(r, since) for r in records), out, columns(bool(variants), fmt)
    )
    if artifacts is None:
        return count, Copied()
    return count, write_artifacts(store.runs_dir / info.run_id, records, artifacts)


def diff(
    store: Store | None,
    base: str,
    new: str,
    cwd: Path,
    base_variant: str | None = None,
    new_variant: str | None = None,
) -> tuple[Diff, str | None]:
    """Compare two runs (run ids, run folders or summary.json files), or two variants of
    runs (of one run when `base` and `new` name the same), with a line naming the variants
    compared (None when neither side has variants)."""
    before = load_summary(base, store, cwd)
    after = before if new == base else load_summary(new, store, cwd)
    old_rates, old_name = side_rates(before, base_variant, "BASE", "--base-variant")
    new_rates, new_name = side_rates(after, new_variant, "NEW", "--new-variant")
    heading = None
    if old_name or new_name:
        heading = f"variant {old_name or '-'} of run {before.run_id} → variant {new_name or '-'}"
        heading += f" of run {after.run_id}"
    return compare(old_rates, new_rates), heading


def side_rates(
    summary: Summary, variant: str | None, side: str, option: str
) -> tuple[dict[TaskKey, TaskRate], str | None]:
    """One side of a diff, and its variant: a run's tasks, or one variant's. A run of several
    variants needs the variant named; a run of one variant is that variant."""
    variants = summary_variants(summary)
    if variant is None and len(variants) > 1:
        raise ShowError(
            f"{side} (run {summary.run_id}) has variants {', '.join(variants)}: choose with "
            f"--variant NAME (both sides) or {option} NAME"
        )
    if variant is None and not variants:
        return task_rates(summary.tasks), None
    chosen = check_variant(variant or variants[0], variants, summary.run_id)
    return variant_rates(summary.tasks, chosen), chosen


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
        "target",
        nargs="?",
        metavar="TASK_ID[/ATTEMPT]",
        help="a task, or one of its attempts; in a run with variants also "
        "TASK_ID/VARIANT[/ATTEMPT]",
    )
    shown.add_argument(
        "--variant",
        metavar="NAME",
        help="only the attempts of this variant (a run with `variants:`); needed for an "
        "attempt several variants ran",
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
        "--variant",
        metavar="NAME",
        help="only the attempts of this variant (a run with variants has a `variant` column)",
    )
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
        "--variant",
        metavar="NAME",
        help="compare this variant of BASE with the same-named variant of NEW",
    )
    compared.add_argument(
        "--base-variant",
        metavar="A",
        help="the variant of BASE to compare (BASE and NEW may name one run: two of its "
        "variants, as its summary's `comparison`)",
    )
    compared.add_argument("--new-variant", metavar="B", help="the variant of NEW to compare")
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
    lines = show(store, args.run_id, args.target, args.full, args.variant)
    print(printable("\n".join(lines)))  # what agents wrote, file names: never raw escapes
    return 0


def _export(args: argparse.Namespace, open_store: OpenStore) -> int:
    store = open_store(args)
    if store is None:
        return 1
    with output(args.out, sys.stdout) as out:
        count, copied = export(store, args.run_id, args.format, out, args.variant, args.artifacts)
    if args.out:
        print(f"{count} attempts written to {args.out}", file=sys.stderr)
    if args.artifacts:
        for line in skipped_lines(copied):
            print(line, file=sys.stderr)
        print(f"{copied.files} artifact files written below {args.artifacts}", file=sys.stderr)
    return 0


def _diff(args: argparse.Namespace) -> int:
    """Runs named by id are looked up in the store, when there is one; files need none."""
    root = (args.cache_dir or cache_dir(args.rootdir or find_rootdir(Path.cwd()))) / "agenteval"
    store = Store(root) if (root / "runs").is_dir() else None
    if args.variant and (args.base_variant or args.new_variant):
        raise ShowError("--variant names both sides' variant: drop --base-variant/--new-variant")
    base_variant = args.base_variant or args.variant
    new_variant = args.new_variant or args.variant
    compared, heading = diff(store, args.base, args.new, Path.cwd(), base_variant, new_variant)
    if heading:
        print(heading)
    print("\n".join(diff_lines(compared)))
    if args.max_regression is None:
        return 0
    failed, line = diff_gate(compared, args.max_regression)
    print(line)
    return 1 if failed else 0
