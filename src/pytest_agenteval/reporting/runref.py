"""What a user names as a run (`latest`, a run id, a run folder, a summary.json) turned into
the run's summary: for `show`, `export`, `diff` and the regression gate's baseline.

A run of the store is summarized from its stored records (never from a summary.json that may be
older); a summary.json named as such is read as it is.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from ..core.errors import AgentevalError, StoreError, display_path
from ..store.index import IndexRow
from ..store.ledger import run_spend
from ..store.runs import RunInfo, Store
from .summary import SUMMARY_SCHEMA, RegressionSummary, Summary, VariantSummary, build_summary

LATEST = "latest"


class RunRefError(AgentevalError):
    """A named run that cannot be found or read; the message says what was tried."""


def resolve_run(store: Store, ref: str) -> str:
    """The run id `ref` names: `latest` (the most recently used run), an id or its start."""
    if ref == LATEST:
        runs = store.runs()
        if not runs:
            raise RunRefError(f"no run stored in {store.runs_dir} yet")
        return runs[0].run_id
    try:
        return store.resolve(ref)
    except StoreError as exc:
        raise RunRefError(str(exc)) from None


def stored_run(store: Store, run_id: str) -> tuple[RunInfo, list[IndexRow]]:
    """The run's description and its stored attempts (the newest of each)."""
    info = store.run(run_id, count=False)
    if info is None:
        raise RunRefError(f"no run {run_id!r} in {store.runs_dir} (`agenteval runs` lists them)")
    rows, _ = store.index(run_id, for_plan=False)
    return info, rows


def run_summary(store: Store, run_id: str, ks: Sequence[int] | None = None) -> Summary:
    """A stored run's summary, computed from its records and what its last session saw (its
    counts, load errors, agents that could not be built, the regression gate's verdict): what
    `agenteval report`, `show`, `diff` and `merge` show, equal to the session's summary."""
    info, rows = stored_run(store, run_id)
    last = info.last_session
    summary = build_summary(
        info,
        rows,
        ks=ks,
        session_counts=last.counts,
        status=info.status,
        agent_errors=last.agent_errors,
        load_errors=last.load_errors,
        store_problems=[p.as_dict() for p in store.problems],
        spend=run_spend(store.runs_dir / run_id),
    )
    ended: dict[str, object] = {}
    if last.regression:
        ended["regression"] = _regression(last.regression, store, run_id)
    if last.variant_regressions is not None and summary.variants:
        ended["variants"] = _variant_regressions(summary, last.variant_regressions, store, run_id)
    if info.status != "running" and last.finished_at is not None:
        ended["finished_at"] = last.finished_at  # when the run ended, not this re-render
    return summary.model_copy(update=ended) if ended else summary


def _regression(block: object, store: Store, run_id: str) -> RegressionSummary:
    """The regression gate's verdict the run's last session stored in run.json."""
    try:
        return RegressionSummary.model_validate(block)
    except ValidationError as exc:
        where = display_path(store.runs_dir / run_id / "run.json")
        raise RunRefError(f"{where}: at sessions[-1].regression: {_first_problem(exc)}") from None


def _variant_regressions(
    summary: Summary, blocks: dict[str, object], store: Store, run_id: str
) -> dict[str, VariantSummary]:
    """The variants with the regression verdicts the run's last session stored."""
    assert summary.variants is not None
    return {
        name: part.model_copy(update={"regression": _regression(blocks[name], store, run_id)})
        if name in blocks
        else part
        for name, part in summary.variants.items()
    }


def load_summary(ref: str, store: Store | None, base: Path) -> Summary:
    """The summary `ref` names: a summary.json file, a folder holding a run (its records) or a
    summary.json, else a run id of `store` (or `latest`)."""
    path = base / ref
    if path.is_file():
        return read_summary_file(path)
    if path.is_dir():
        if (path / "index.jsonl").is_file() and (path / "run.json").is_file():
            return run_summary(Store(path.parent.parent), path.name)
        if (path / "summary.json").is_file():
            return read_summary_file(path / "summary.json")
    what = "a folder with neither a run nor a summary.json" if path.is_dir() else "no file"
    if store is None:
        raise RunRefError(f"{ref!r} is {what}, and no runs are stored here to look it up")
    try:
        return run_summary(store, resolve_run(store, ref))
    except RunRefError as exc:
        raise RunRefError(f"{exc}; and {ref!r} is {what}") from None


def read_summary_file(path: Path) -> Summary:
    """A summary.json as the model; a damaged or foreign file is a RunRefError naming the
    first field that is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunRefError(f"cannot read {display_path(path)}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RunRefError(f"{display_path(path)} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SUMMARY_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise RunRefError(
            f"{display_path(path)} is not an {SUMMARY_SCHEMA} summary (schema {found!r}); "
            "name a summary.json, a run folder or a run id"
        )
    try:
        return Summary.model_validate(data)
    except ValidationError as exc:
        raise RunRefError(
            f"{display_path(path)}: {_first_problem(exc)}; "
            "write the summary again with `agenteval report RUN_ID`"
        ) from None


def _first_problem(exc: ValidationError) -> str:
    """`at tasks[3].n: Field required`: the first field pydantic found wrong, and how."""
    error = exc.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"at {where.lstrip('.') or 'top'}: {error['msg']}{more}"
