"""The self-contained HTML report: one file that works offline (inline CSS, SVG and a little
script), made from the summary and the stored records of one run.

The headline and the plots are rendered here; the per-task table and each attempt's details
travel as JSON in a `<script type="application/json">` block that the page's script shows with
`textContent` only, so an agent's output is always text and never markup.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterable
from html import escape
from importlib import resources
from pathlib import Path
from typing import Any

from ..core.errors import ReportError, os_failure
from ..core.identity import AttemptId
from ..core.model import Verdict
from ..core.records import AttemptRecord
from ..core.trace import describe, read_event
from ..store.artifacts import Refused, kept_paths
from ..store.artifacts import read as read_artifact
from ..store.problems import NOT_READ, StoreProblem
from ..store.runs import Store
from .html_variants import leaderboard as _leaderboard
from .html_variants import matrix_rows
from .html_variants import matrix_shell as _matrix_shell
from .html_variants import tag_table as _tag_table
from .leaderboard import tag_rows
from .metrics import INTERVAL_METHOD, MIN_TASKS, percentile
from .reports import _atomic_write, drift_lines, fmt
from .summary import Metrics, Summary, TaskSummary, Totals, VariantSummary, narrowed_words
from .svg import Bar, Series, histogram, interval_bars, line_plot, seconds

TEXT_LIMIT = 2000
"""Characters of an output, error or transcript the page holds; the full length is shown."""
EVENT_LIMIT = 500
"""Events of one attempt's trace the page holds (the rest are counted)."""
MAX_TAG_BARS = 30
SMALL_TEXT = 4096
"""Bytes of a kept artifact up to which the drill-down shows its text."""
_SCRIPT_SAFE = (
    ("<", "\\u003c"),
    (">", "\\u003e"),
    ("&", "\\u0026"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
)

Details = dict[tuple[str, str, str | None], list[dict[str, Any]]]
"""Per (dataset, task id, variant): the page's view of each stored attempt, by attempt index."""


def attempt_details(store: Store, run_id: str, reused: Iterable[AttemptId] = ()) -> Details:
    """What the drill-down shows of every stored attempt of a run, read from its records.

    `reused` are the attempts whose stored verdict the last session replayed."""
    replayed = set(reused)
    details: Details = {}
    for record in store.records(run_id):
        view = attempt_view(record, record.key in replayed)
        if record.changed_files is not None:
            refused: list[Refused] = []
            view["fs"] = artifact_view(record, store.runs_dir / run_id, refused)
            store.found(StoreProblem(e.where, e.why, NOT_READ) for e in refused)
        details.setdefault((record.dataset, record.task_id, record.variant), []).append(view)
    for views in details.values():
        views.sort(key=lambda v: v["i"])
    return details


def attempt_view(record: AttemptRecord, reused: bool = False) -> dict[str, Any]:
    """One attempt as the page's JSON: long texts cut to TEXT_LIMIT with their full length;
    `c` is everything it cost (agent + judges), `ca` and `cj` the split."""
    output, output_len = _clip(record.output)
    error, error_len = _clip(record.error)
    timeline = trace_view(record.transcript)
    plain = None if timeline is not None else record.transcript
    transcript, transcript_len = _clip(_transcript_text(plain))
    flags = [*(["reused"] if reused else []), *_history_flags(record), *_cache_flags(record)]
    return {
        "i": record.attempt,
        "s": record.status,
        "d": record.duration,
        **({"w": record.wait} if record.wait else {}),
        "in": _clipped(_as_text(record.task_input)),
        "x": _clipped(_as_text(record.expected)),
        "o": output,
        "ol": output_len,
        "v": [_verdict_view(v) for v in record.verdicts],
        "e": error,
        "el": error_len,
        "et": record.error_type,
        "ph": record.phase,
        "t": transcript,
        "tl": transcript_len,
        **({"tr": timeline} if timeline is not None else {}),
        **({"st": record.stopped} if record.stopped else {}),
        **({"tm": _timings_view(record)} if record.timings else {}),
        "u": record.usage,
        "c": record.spend,
        "ca": record.cost,
        "cj": record.judge_cost,
        "f": flags,
    }


def _cache_flags(record: AttemptRecord) -> list[str]:
    """`cached N`: how many of the attempt's model calls the model cache answered."""
    hits = (record.usage or {}).get("cached_calls")
    return [f"cached {hits}"] if hits else []


def trace_view(transcript: list[Any] | None) -> dict[str, Any] | None:
    """The timeline of a typed trace: each event as [type, heading, content cut to
    TEXT_LIMIT, its full length] (a plain item among them as ["item", "", its JSON, length]),
    with the turns and tool calls counted; None for a transcript without typed events."""
    if not transcript:
        return None
    events = [read_event(item) for item in transcript]
    if all(e is None for e in events):
        return None
    rows: list[list[Any]] = []
    for item, event in zip(transcript[:EVENT_LIMIT], events, strict=False):
        if event is None:
            kind, head, body = "item", "", json.dumps(item, ensure_ascii=False)
        else:
            kind, (head, body) = event.type, describe(event)
        text, length = _clip(body)
        rows.append([kind, head, text or None, length])
    return {
        "e": rows,
        "n": len(transcript),
        "turns": sum(1 for e in events if e is not None and e.type == "model_call"),
        "tools": sum(1 for e in events if e is not None and e.type == "tool_call"),
    }


def _timings_view(record: AttemptRecord) -> list[list[Any]]:
    """[[phase, seconds], ...] with each grader named by its verdict."""
    rows: list[list[Any]] = []
    for name, value in (record.timings or {}).items():
        if name == "graders" and isinstance(value, list):
            names = [v.grader for v in record.verdicts]
            for index, seconds in enumerate(value):
                grader = names[index] if index < len(names) else f"grader {index}"
                rows.append([grader, seconds])
        else:
            rows.append([name, value])
    return rows


def artifact_view(
    record: AttemptRecord, run_dir: Path, refused: list[Refused] | None = None
) -> list[list[Any]]:
    """The files the attempt's agent changed, each [path, change, size, kept, text] (a note:
    [text, "note", 0, false, null]): `text` is the content of a kept text file of at most
    SMALL_TEXT bytes (the page escapes it as all text), else None. A stored path that names
    no regular file inside the attempt's folder is never read: the page says so in a note
    after it, and the refusal is added to `refused`."""
    rows = []
    for entry in record.changed_files or ():
        if "note" in entry:
            rows.append([entry["note"], "note", 0, False, None])
            continue
        text = None
        if entry["path"] in kept_paths([entry]) and entry["size"] <= SMALL_TEXT:
            try:
                text = _text_of(read_artifact(run_dir, record.key, entry["path"], SMALL_TEXT + 1))
            except Refused as exc:
                rows.append([entry["path"], entry["change"], entry["size"], False, None])
                rows.append([f"not read: {exc.why}", "note", 0, False, None])
                if refused is not None:
                    refused.append(exc)
                continue
        rows.append([entry["path"], entry["change"], entry["size"], entry["kept"], text])
    return rows


def _text_of(data: bytes | None) -> str | None:
    """`data` as text when it is UTF-8 without NUL bytes (a text file) of at most SMALL_TEXT
    bytes (the size its record says may be wrong), else None."""
    if data is None or b"\0" in data or len(data) > SMALL_TEXT:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _verdict_view(verdict: Verdict) -> list[Any]:
    """[grader, passed, score, reason], and for an LLM judge a fifth item: its threshold,
    model, cost, and its prompt and raw reply as [text, full length]."""
    row: list[Any] = [verdict.grader, verdict.passed, verdict.score, _clip(verdict.reason)[0]]
    details = verdict.details or {}
    if "prompt" not in details and "reply" not in details:
        return row
    prompt = details.get("prompt")
    prompt_text = _transcript_text(prompt) if isinstance(prompt, list) else None
    judge = {
        "th": details.get("threshold"),
        "m": details.get("model"),
        "c": verdict.cost,
        "p": _clipped(prompt_text),
        "r": _clipped(details.get("reply") if isinstance(details.get("reply"), str) else None),
    }
    return [*row, judge]


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def _clipped(text: str | None) -> list[Any] | None:
    """[text cut to TEXT_LIMIT, full length], or None."""
    return None if text is None else list(_clip(text))


def _transcript_text(transcript: list[Any] | None) -> str | None:
    """One line of JSON per message: readable, and written by the fast C encoder."""
    if transcript is None:
        return None
    return "\n".join(json.dumps(message, ensure_ascii=False) for message in transcript)


def _history_flags(record: AttemptRecord) -> list[str]:
    """`regraded` for a stored answer graded again; `rerun` when the agent answered again in
    place of an earlier record."""
    if record.regraded:
        return ["regraded"]
    return ["rerun"] if record.previous else []


def _clip(text: str | None) -> tuple[str | None, int]:
    if text is None:
        return None, 0
    return (text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT]), len(text)


def write_html(summary: Summary, details: Details, path: Path) -> Path:
    """Write the report atomically; a file that cannot be written raises ReportError."""
    page = render_html(summary, details)
    if not path.parent.exists():  # a file in its place fails the write: "Not a directory"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportError(os_failure("create", path.parent, exc)) from None
    return _atomic_write(path, lambda f: f.write(page))


def render_html(summary: Summary, details: Details) -> str:
    """The whole page as text."""
    ds = summary.dataset
    title = f"agenteval {ds.name} {ds.version} · run {summary.run_id}"
    k = _largest_k(summary)
    data: dict[str, Any] = {
        "k": k,
        "run": summary.run_id,
        "multi": len(summary.datasets) > 1,
        "tasks": [_task_view(task, details, k) for task in summary.tasks],
        "tags": sorted({tag for task in summary.tasks for tag in task.tags}),
    }
    parts = [_headline(summary)]
    if summary.variants:
        names = list(summary.variants)
        data["variants"], data["matrix"] = names, matrix_rows(summary.tasks, names)
        parts += [_leaderboard(summary, k), _tag_table(summary)]
    parts += [_plots(summary), _problems(summary)]
    if summary.variants:
        parts.append(_matrix_shell(list(summary.variants)))
    body = "\n".join([*parts, _table_shell(k)])
    js = _asset("report.js")
    return _PAGE.format(
        title=escape(title),
        css=_asset("report.css"),
        body=body,
        data=script_json(data),
        js=js,
        script_hash=_csp_hash(js),
    )


def script_json(value: Any) -> str:
    """JSON that cannot end its `<script>` element nor open a comment: `<`, `>` and `&` (and the
    line separators old parsers choke on) are written as `\\uXXXX` escapes."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in _SCRIPT_SAFE:  # str.replace: 15x faster than str.translate here
        text = text.replace(char, escaped)
    return text


def _csp_hash(script: str) -> str:
    """The page's policy runs this one script and nothing else: no injected inline handler,
    no other script, no network (a second line of defence behind `textContent`)."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def _asset(name: str) -> str:
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; \
style-src 'unsafe-inline'; script-src '{script_hash}'">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<main>
{body}
</main>
<script type="application/json" id="agenteval-data">{data}</script>
<script>{js}</script>
</body>
</html>
"""


def _largest_k(summary: Summary) -> int:
    return max(_ks(summary), default=1)


def _ks(summary: Summary) -> list[int]:
    """The k values of the run's pass@k: of its metrics, else of any of its variants."""
    groups = [summary.metrics] if summary.metrics else [v.metrics for v in _variants(summary)]
    return sorted({int(k) for group in groups for k in group.pass_at_k})


def _variants(summary: Summary) -> list[VariantSummary]:
    return list((summary.variants or {}).values())


def _task_view(task: TaskSummary, details: Details, k: int) -> dict[str, Any]:
    """A table row: the summary's numbers (pass@k at the suite's largest k: None for a task
    with fewer attempts), cost and p50 duration from the records, and the attempts (the
    summary's short form where a full record could not be read)."""
    attempts = details.get((task.dataset, task.task_id, task.variant), [])
    read = {a["i"] for a in attempts}
    attempts = attempts + [
        {"i": a.index, "s": a.status, "d": a.duration, "r": a.reason, "lost": True}
        for a in task.attempts
        if a.index not in read
    ]
    costs = [a["c"] for a in attempts if a.get("c") is not None]  # agent + judges
    reasons = {a.index: a.reason for a in task.attempts}
    for attempt in attempts:
        attempt.setdefault("r", reasons.get(attempt["i"], ""))
    return {
        "id": task.task_id,
        "ds": task.dataset,
        **({"v": task.variant} if task.variant is not None else {}),
        "tags": task.tags,
        "n": task.n,
        "c": task.c,
        "e": task.errors,
        "p1": task.pass_at_k.get("1"),
        "pk": task.pass_at_k.get(str(k)),
        "cost": sum(costs) if costs else None,
        "p50": percentile(sorted(a.duration for a in task.attempts), 50),
        "a": sorted(attempts, key=lambda a: a["i"]),
    }


# --- headline ------------------------------------------------------------------------------------


def _headline(summary: Summary) -> str:
    m, counts, tot = summary.metrics, summary.counts, summary.totals
    ds = summary.dataset
    status = summary.status
    tasks = m.n_tasks if m else len({(t.dataset, t.task_id) for t in summary.tasks})
    headline = ("pass@1", _pass_at_1(m)) if m else ("variants", _variant_count(summary))
    cells = [
        headline,
        ("tasks", f"{tasks}{_not_loaded(summary)}"),
        ("attempts", _attempts(summary)),
        ("passed / failed / errors", f"{counts.passed} / {counts.fail} / {counts.error}"),
        *([("over budget", str(counts.over_budget))] if counts.over_budget else []),
        *([("sandbox build failed", str(counts.build_failed))] if counts.build_failed else []),
        *([("sandbox errors", str(counts.sandbox_error))] if counts.sandbox_error else []),
        ("tokens in / out", f"{_int(tot.input_tokens)} / {_int(tot.output_tokens)}"),
        ("cost (US$)", _cost(tot)),
        ("duration p50 / p95", f"{_sec(tot.duration_p50)} / {_sec(tot.duration_p95)}"),
    ]
    done = (("run", counts.run), ("reused", counts.reused), ("regraded", counts.regraded))
    session = [f"{n} {what}" for what, n in done if n]
    if counts.load_error:
        session.append(f"{counts.load_error} load errors")
    fingerprint = _fingerprint(summary.agent.fingerprint)
    narrowed = narrowed_words(summary)
    return f"""<header>
<h1>{escape(ds.name)} <span class="muted">{escape(ds.version)}</span></h1>
<p class="meta">run <code id="run-id">{escape(summary.run_id)}</code>
<span class="badge status-{escape(status)}" id="run-status">{escape(status)}</span>
agent <strong>{escape(summary.agent.label)}</strong>
· started {_when(summary.created_at)} · finished {_when(summary.finished_at)}
{" · last session: " + escape(", ".join(session)) if session else ""}</p>
{f'<p class="meta" id="narrowed">{escape(narrowed)}</p>' if narrowed else ""}
{"".join(f'<p class="meta drift">{escape(line)}</p>' for line in drift_lines(summary))}
<p class="meta fingerprint">agent fingerprint <code>{escape(fingerprint)}</code></p>
<dl class="headline">
{"".join(f"<div><dt>{escape(k)}</dt><dd>{v}</dd></div>" for k, v in cells)}
</dl>
</header>"""


def _attempts(summary: Summary) -> str:
    """The attempts recorded, and of how many planned when the run ended early."""
    planned = summary.planned
    return f"{summary.n_attempts}" + (f" of {planned} planned" if planned is not None else "")


def _variant_count(summary: Summary) -> str:
    """In place of pass@1 for a run of several variants: their count (numbers per variant are
    in the leaderboard, never pooled)."""
    count = len(summary.variants or {})
    return (
        f'<span class="big" id="variant-count">{count}</span>'
        '<span class="ci">pass@1 per variant below</span>'
    )


def _not_loaded(summary: Summary) -> str:
    """Beside the task count: how many tasks could not be loaded (not in pass@1)."""
    broken = len(summary.load_errors)
    return f' <span class="not-loaded">+ {broken} not loaded</span>' if broken else ""


def _cost(tot: Totals) -> str:
    """Everything the run cost, in US dollars (what `pricing:` prices in and the caps count),
    and its split between the agents and the LLM judges when a judge cost something."""
    if tot.cost is None:
        return "n/a"
    if tot.judge_cost is None:
        return f"${tot.cost:.4f}"
    return (
        f'${tot.cost:.4f}<span class="ci" id="cost-split">agent ${tot.agent_cost or 0:.4f}'
        f" · judge ${tot.judge_cost:.4f}</span>"
    )


def _fingerprint(fingerprint: dict[str, Any]) -> str:
    """The fingerprint a resume checks, as `part: value` pairs (nested parts named by their
    path, `variants: ds/base = ...`; values unquoted, unset parts left out) rather than JSON
    or Python reprs within it."""
    parts = []
    for key, value in sorted(fingerprint.items()):
        if isinstance(value, dict):
            value = ", ".join(f"{path} = {leaf}" for path, leaf in _leaves(value))
        if value is not None and value != "":
            parts.append(f"{key}: {value}")
    return " · ".join(parts) or "none"


def _leaves(value: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """(path, text) of each set value in nested dicts, keys sorted and joined by `/`; a
    value that is not text is JSON."""
    found: list[tuple[str, str]] = []
    for key, item in sorted(value.items()):
        path = f"{prefix}{key}"
        if isinstance(item, dict):
            found += _leaves(item, f"{path}/")
        elif item is not None:
            found.append((path, item if isinstance(item, str) else json.dumps(item)))
    return found


def _pass_at_1(m: Metrics) -> str:
    value = f'<span class="big" id="pass-at-1">{fmt(m.pass_at_k.get("1"))}</span>'
    tasks = m.tasks_per_k.get("1", 0)
    if m.pass_at_k.get("1") is None:
        return value
    if not m.pass_at_1_ci95:
        return f'{value}<span class="ci">95% CI n/a<br>fewer than {MIN_TASKS} tasks</span>'
    low, high = m.pass_at_1_ci95
    return (
        f'{value}<span class="ci" title="{INTERVAL_METHOD}: mean ± t x standard error of the '
        f"per-task pass@1 across {tasks} tasks (standard error "
        f'{fmt(m.pass_at_1_stderr)})">95% CI {fmt(low)}-{fmt(high)}'
        f"<br>mean ± t·SE over {tasks} tasks</span>"
    )


def _int(value: int | float | None) -> str:
    return "n/a" if value is None else f"{int(value):,}"


def _sec(value: float | None) -> str:
    return "n/a" if value is None else seconds(value)


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


# --- plots -----------------------------------------------------------------------------------


def _plots(summary: Summary) -> str:
    over_k = _variant_curves(summary) if summary.variants else _pass_curves(summary)
    bars, title = _tag_bars(summary)
    durations = [a.duration for t in summary.tasks for a in t.attempts]
    return (
        '<section class="plots">\n'
        + "\n".join(
            f"<figure>{svg}</figure>"
            for svg in (
                over_k,
                interval_bars(
                    title, bars, "pass@1 (mean over the tag's tasks)", _no_tag_bars(summary)
                ),
                histogram("attempt duration", durations, "duration of each attempt"),
            )
        )
        + "\n</section>"
    )


def _pass_curves(summary: Summary) -> str:
    """pass@k and pass^k of the run over k, told apart by marker and dash (they coincide
    when every task passed all its attempts or none: then the plot says so)."""
    m = summary.metrics
    assert m is not None  # a run without variants, or of one
    ks = [int(k) for k in m.pass_at_k]
    per_k = [f"{m.tasks_per_k.get(str(k), 0)} tasks" for k in ks]
    at_k = [m.pass_at_k[str(k)] for k in ks]
    power_k = [m.pass_power_k[str(k)] for k in ks]
    same = all(_close(a, b) for a, b in zip(at_k, power_k, strict=True))
    return line_plot(
        "pass@k and pass^k",
        ks,
        [Series("pass@k", at_k), Series("pass^k", power_k)],
        per_k,
        "k (tasks behind each k)",
        "mean over tasks",
        marked=True,
        remark=(COINCIDE if len(ks) > 1 else ONE_K) if same else "",
    )


COINCIDE = "pass@k = pass^k at every k: each task passed all its attempts or none"
"""What the pass@k plot says when its two lines lie on top of each other."""
ONE_K = "only k = 1: pass@1 and pass^1 are the same number"


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) < 1e-9


def _variant_curves(summary: Summary) -> str:
    """Every variant's pass@k on one plot, told apart by marker and dash as well as color."""
    ks = _ks(summary)
    variants = summary.variants or {}
    series = [
        Series(name, [v.metrics.pass_at_k.get(str(k)) for k in ks]) for name, v in variants.items()
    ]
    behind = [max(v.metrics.tasks_per_k.get(str(k), 0) for v in variants.values()) for k in ks]
    return line_plot(
        "pass@k by variant",
        ks,
        series,
        [f"{n} tasks" for n in behind],
        "k (most tasks behind each k)",
        "mean over tasks",
        marked=True,
    )


def _tag_bars(summary: Summary) -> tuple[list[Bar], str]:
    """The tag plot's bars, the tags with most tasks first (MAX_TAG_BARS at most), and its
    title; with variants a bar per tag and variant (`tag · variant`), each tag's together."""
    if summary.variants is None:
        tags = sorted(summary.tags.items(), key=lambda item: (-item[1].n_tasks, item[0]))
        bars = [_tag_bar(tag, g) for tag, g in tags[:MAX_TAG_BARS]]
        return bars, _tags_title("pass@1 by tag, 95% CI", len(bars), len(tags))
    names = list(summary.variants)
    rows = sorted(tag_rows(summary), key=lambda row: (-row.tasks, row.tag))
    shown = rows[: max(1, MAX_TAG_BARS // len(names))]
    bars = [
        _tag_bar(f"{row.tag} · {name}", cell)
        for row in shown
        for name, cell in zip(names, row.cells, strict=True)
        if cell is not None
    ]
    return bars, _tags_title("pass@1 by tag and variant, 95% CI", len(shown), len(rows))


def _tags_title(title: str, shown: int, tags: int) -> str:
    return title + (f" ({shown} largest of {tags} tags)" if tags > shown else "")


def _no_tag_bars(summary: Summary) -> str:
    """What the tag plot says when it has no bar: never "no task has tags" when some has."""
    if any(task.tags for task in summary.tasks):
        return "only tasks with their own agent have tags"
    return "no task has tags"


def _tag_bar(tag: str, group: Metrics) -> Bar:
    low, high = group.pass_at_1_ci95 or (None, None)
    return Bar(tag, group.pass_at_k.get("1"), low, high, f"{group.n_tasks} tasks")


# --- problems and the table --------------------------------------------------------------------


def _problems(summary: Summary) -> str:
    items = []
    for error in summary.agent_errors:
        items.append(("agent error", f"{error.attempts} attempts not run", error.message))
    for load in summary.load_errors:
        items.append(("load error", load.name, load.message))
    for damage in summary.store_problems:
        items.append(("store damage", damage.where, f"{damage.problem}; {damage.effect}"))
    if not items:
        return ""
    rows = "\n".join(
        f'<li><span class="badge status-error">{escape(kind)}</span> <strong>{escape(what)}'
        f"</strong><pre>{escape(message)}</pre></li>"
        for kind, what, message in items
    )
    return f'<section id="problems"><h2>Problems ({len(items)})</h2><ul>{rows}</ul></section>'


def _table_shell(k: int) -> str:
    """The table's frame; the script fills it (and its filters) from the embedded data.
    pass@k has its column only when k > 1 (at k = 1 it is pass@1)."""
    columns = [
        ("id", "task", ""),
        ("n", "n", "num"),
        ("c", "passed", "num"),
        ("e", "errors", "num"),
        ("p1", "pass@1", "num"),
        *([("pk", f"pass@{k}", "num")] if k > 1 else []),  # a one-attempt run: pass@1 once
        ("cost", "cost", "num"),
        ("p50", "p50 duration", "num"),
    ]
    heads = "".join(
        f'<th data-key="{key}" class="{cls}" aria-sort="none" tabindex="0">{escape(label)}</th>'
        for key, label, cls in columns
    )
    return f"""<section id="tasks">
<h2>Tasks</h2>
<div class="filters">
<input id="filter-text" type="search" placeholder="filter: task id, tag or reason"
 aria-label="filter text">
<select id="filter-tag" aria-label="tag"><option value="">all tags</option></select>
<select id="filter-status" aria-label="status">
<option value="">all tasks</option><option value="pass">all attempts passed</option>
<option value="fail">some attempt did not pass</option>
<option value="none">no attempt passed</option>
<option value="error">has errors</option></select>
<span id="shown-count" class="muted"></span>
</div>
<table id="task-table"><thead><tr>{heads}</tr></thead><tbody></tbody></table>
<p><button id="more" type="button" hidden>show more</button></p>
<noscript>The task table needs JavaScript; the numbers above do not.</noscript>
</section>"""
