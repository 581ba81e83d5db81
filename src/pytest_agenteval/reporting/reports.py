"""Render a summary: summary.json, summary.md, per-task junit.xml and the terminal section."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from xml.sax.saxutils import quoteattr

from junitparser import xunit2

from ..core.errors import ReportError, os_failure
from ..core.gcpause import gc_paused
from ..core.numbers import rounded_values, shown
from ..core.text import counted, excerpt, json_text, xml_safe
from ..store.problems import StoreProblem
from .leaderboard import leaderboard_markdown, leaderboard_terminal, tags_markdown, tags_terminal
from .metrics import INTERVAL_METHOD, MIN_TASKS
from .regression import regression_lines
from .spend import spend_lines
from .summary import (
    AgentErrorSummary,
    Counts,
    LoadErrorSummary,
    Metrics,
    RegressionSummary,
    StoreProblemSummary,
    Summary,
    TaskSummary,
    Totals,
    attempts_words,
    narrowed_words,
    task_passes,
)

LOWEST_SHOWN = 10


def write_reports(summary: Summary, out_dir: Path, rule: str) -> list[Path]:
    """Write summary.json, summary.md and junit.xml atomically; returns their paths.

    A file that cannot be written raises ReportError naming it and the errno."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(os_failure("create", out_dir, exc)) from None
    markdown = render_markdown(summary, rule)
    paths = [
        _atomic_write(out_dir / "summary.json", lambda f: write_json(summary, f)),
        _atomic_write(out_dir / "summary.md", lambda f: f.write(markdown)),
        _atomic_write(out_dir / "junit.xml", lambda f: write_junit(summary, rule, f)),
    ]
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        try:
            with open(step_summary, "a", encoding="utf-8") as f:
                f.write(markdown + "\n")
        except OSError as exc:
            raise ReportError(os_failure("append to", step_summary, exc)) from None
    return paths


def write_json(summary: Summary, out: TextIO) -> None:
    """Indented at the top, one line per task: readable, fast (C encoder), written as it goes."""
    with gc_paused():  # a dict per task and attempt, no cycle: see `build_summary`
        data = summary.to_json()
    tasks = data.pop("tasks")
    text = json.dumps({**data, "tasks": []}, indent=1, ensure_ascii=False)
    before, _, after = text.rpartition('"tasks": []')  # the last key
    out.write(before + '"tasks": [')
    for index, task in enumerate(tasks):
        out.write(("\n  " if index == 0 else ",\n  ") + json_text(task))
    out.write(("\n ]" if tasks else "]") + after + "\n")


def _atomic_write(path: Path, write: Callable[[Any], Any]) -> Path:
    """Write a temporary file beside `path`, then rename it: nobody reads half a report.

    Created like any other file (0666 minus the umask), not private as mkstemp's are.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                write(f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise ReportError(os_failure("write", path, exc)) from None
    return path


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


# --- Markdown --------------------------------------------------------------------------------


def render_markdown(summary: Summary, rule: str) -> str:
    """A readable report for humans and CI step summaries."""
    m, counts = summary.metrics, summary.counts
    ds = summary.dataset
    narrowed = narrowed_words(summary)
    lines = [
        f"# agenteval: {_md(ds.name)} {_md(ds.version)}",
        "",
        f"Run `{summary.run_id}` · agent {_md(summary.agent.label)} · "
        f"status **{summary.status}** · {f'**{_md(narrowed)}** · ' if narrowed else ''}"
        f"{counted(_n_tasks(summary), 'task')}, {attempts_words(summary)}",
        "",
    ]
    if summary.variants is not None or m is None:
        lines += leaderboard_markdown(summary, _md)
    else:
        lines += ["| k | pass@k | pass^k | tasks |", "|---|---|---|---|"]
        for k, value in m.pass_at_k.items():
            lines.append(f"| {k} | {fmt(value)} | {fmt(m.pass_power_k[k])} | {m.tasks_per_k[k]} |")
        lines += [_uneven_note(m)] if _uneven(m) else []
        lines.append("")
    lines += [_counts_line(counts), ""]
    lines += [*retry_lines(summary), ""] if counts.retried else []
    lines += [f"**{_md(line)}**\n" for line in drift_lines(summary)]
    spent = [line for line in (_usage_line(summary.totals),) if line] + spend_lines(summary)
    lines += [*(f"- {_md(line)}" for line in spent), ""] if spent else []
    if summary.variants is None and m is not None and m.pass_at_k.get("1") is not None:
        lines += [_interval(m), ""]
    variant_tags = tags_markdown(summary, _md) if summary.variants is not None else None
    lines += _markdown_tags(summary.tags) if variant_tags is None else variant_tags
    for block in _regressions(summary):
        gate_lines = regression_lines(block, verbose=True)
        lines += [f"**{_md(gate_lines[0])}**", "", *(f"    {line}" for line in gate_lines[1:]), ""]
    lines += [f"**agent error**: {_md(e.message)}" for e in summary.agent_errors]
    variants = summary.variants is not None
    lines += [
        f"| task |{' variant |' if variants else ''} passed | errors | pass@1 | rule | reason |",
        f"|---|{'---|' if variants else ''}---|---|---|---|---|",
    ]
    for task in sorted(summary.tasks, key=_pass_rate):
        ok = "ok" if task_passes(task, rule) else "**FAIL**"
        reasons = [a.reason for a in task.attempts if a.status != "pass"]
        reason = _md(excerpt(reasons[0], 120)) if reasons else ""
        variant = f" {_md(task.variant or '(own agent)')} |" if variants else ""
        lines.append(
            f"| {_md(task.task_id)} |{variant} {task.c}/{task.n} | {task.errors} | "
            f"{fmt(task.pass_at_k.get('1'))} | {ok} | {reason} |"
        )
    broken = summary.load_errors
    if broken:
        heading = f"**{counted(len(broken), 'task')} could not be loaded** (not evaluated):"
        lines += ["", heading, ""]
        lines += [f"- {_md(e.name)}: {_md(excerpt(e.message, 300))}" for e in broken]
    for damage in summary.store_problems:
        lines.append(
            f"\n**store damage** `{_md(damage.where)}`: {_md(damage.problem)}; {_md(damage.effect)}"
        )
    return "\n".join(lines) + "\n"


def _n_tasks(summary: Summary) -> int:
    """The run's tasks: its metrics' count, or with several variants each task once."""
    if summary.metrics is not None and summary.variants is None:
        return summary.metrics.n_tasks
    return len({(t.dataset, t.task_id) for t in summary.tasks})


def _regressions(summary: Summary) -> list[RegressionSummary]:
    """The regression verdicts against the baseline (`--agenteval-baseline`): the run's, or
    each variant's."""
    blocks = [summary.regression, *(part.regression for part in (summary.variants or {}).values())]
    return [block for block in blocks if block is not None]


def _interval(m: Metrics) -> str:
    """The uncertainty of pass@1, labelled with what it is (`metrics.mean_interval`), and the
    standard error it comes from (a `±` alone reads as the interval's half-width); "n/a"
    below MIN_TASKS tasks rather than a false certainty."""
    tasks = m.tasks_per_k.get("1", 0)
    head = f"pass@1 {fmt(m.pass_at_k.get('1'))}, 95% CI"
    if not m.pass_at_1_ci95:
        return f"{head} n/a (fewer than {MIN_TASKS} tasks)"
    low, high = m.pass_at_1_ci95
    return (
        f"{head} {fmt(low)}-{fmt(high)} by {INTERVAL_METHOD} "
        f"(standard error {fmt(m.pass_at_1_stderr)} across {tasks} tasks)"
    )


def _uneven(m: Metrics) -> bool:
    """Whether some k rests on fewer tasks than others (tasks with fewer attempts)."""
    return len(set(m.tasks_per_k.values())) > 1


def _uneven_note(m: Metrics) -> str:
    return (
        "pass@k and pass^k at each k are means over the tasks with at least k attempts "
        f"(tasks per k: {', '.join(f'{k}: {n}' for k, n in m.tasks_per_k.items())}), "
        "so values at different k may rest on different tasks."
    )


def _tasks_per_k(m: Metrics) -> str:
    """How many tasks each k rests on, compactly."""
    per_k = list(m.tasks_per_k.values())
    if not per_k:
        return ""
    if not _uneven(m):
        return f"  (over {counted(per_k[0], 'task')} each)"
    return f"  (over {', '.join(str(n) for n in per_k)} tasks: those with >= k attempts)"


def _usage_line(totals: Totals) -> str:
    """Tokens of the run, or "" when no agent reported them (cost: `spend_lines`)."""
    if totals.input_tokens is None and totals.output_tokens is None:
        return ""
    return f"tokens {totals.input_tokens or 0} in / {totals.output_tokens or 0} out"


def _tags_top_k(tags: dict[str, Metrics]) -> int | None:
    """The largest k above 1 with a value in some tag: the pass@k a tag table shows."""
    ks = [int(k) for g in tags.values() for k, v in g.pass_at_k.items() if v is not None]
    top = max(ks, default=1)
    return top if top > 1 else None


def _tag_rows(tags: dict[str, Metrics], top: int | None) -> list[tuple[str, str, str, str, str]]:
    """(tag, tasks, pass@1, its 95% CI, pass@top) per tag."""
    rows = []
    for tag, g in tags.items():
        ci = g.pass_at_1_ci95
        rows.append(
            (
                tag,
                str(g.n_tasks),
                fmt(g.pass_at_k.get("1")),
                f"{fmt(ci[0])}-{fmt(ci[1])}" if ci else "n/a",
                fmt(g.pass_at_k.get(str(top))) if top else "",
            )
        )
    return rows


def _markdown_tags(tags: dict[str, Metrics]) -> list[str]:
    if not tags:
        return []
    top = _tags_top_k(tags)
    label = f"pass@{top}" if top else ""
    head = ["tag", "tasks", "pass@1", "95% CI", *([label] if label else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in _tag_rows(tags, top):
        cells = [_md(row[0]), *row[1:4], *([row[4]] if label else [])]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _terminal_tags(tags: dict[str, Metrics], verbose: bool) -> list[str]:
    """The per-tag table, compact: capped at LOWEST_SHOWN rows unless verbose."""
    if not tags:
        return []
    top = _tags_top_k(tags)
    rows = _tag_rows(tags, top)
    shown = rows if verbose else rows[:LOWEST_SHOWN]
    width = max(len("tag"), *(len(r[0]) for r in shown))
    label = f"pass@{top}" if top else ""
    lines = [f"  {'tag':<{width}}  tasks  pass@1  95% CI       {label}".rstrip()]
    for tag, n, p1, ci, pk in shown:
        lines.append(f"  {tag:<{width}}  {n:>5}  {p1:>6}  {ci:<11}  {pk}".rstrip())
    if len(rows) > len(shown):
        lines.append(f"  … {len(rows) - len(shown)} more tags (-v shows all)")
    return ["by tag:", *lines]


def _agent_error_lines(errors: list[AgentErrorSummary]) -> list[str]:
    """Agents that could not be built, each once, with the attempts that did not start."""
    if not errors:
        return []
    total = sum(e.attempts for e in errors)
    lines = [
        f"{total} attempt(s) not run: their agent cannot be built; nothing was recorded for "
        "them, so --resume-suite runs them once it is fixed:"
    ]
    for error in errors:
        lines += [f"  {line}" for line in error.message.splitlines()]
    return lines


def _md(text: str) -> str:
    return xml_safe(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")


def _pass_rate(task: TaskSummary) -> tuple[float, str, str]:
    return (task.c / task.n if task.n else 0.0, task.task_id, task.variant or "")


def _class_lines(counts: Counts) -> list[str]:
    """`errors by class: rate_limited 2, agent_error 1`, when there are errors."""
    found = counts.error_classes
    if not found:
        return []
    return ["errors by class: " + ", ".join(f"{name} {n}" for name, n in found.items())]


def retry_lines(summary: Summary) -> list[str]:
    """`1 attempt needed a retry (v1 1, v2 0)`, when one did: per variant with variants."""
    total = summary.counts.retried
    if not total:
        return []
    line = f"{counted(total, 'attempt')} needed a retry"
    if summary.variants is not None:
        each = ", ".join(f"{name} {v.counts.retried or 0}" for name, v in summary.variants.items())
        line += f" ({each})"
    return [line]


def _counts_line(counts: Counts) -> str:
    """`7 passed, 1 failed, 3 errors (2 over budget, 1 sandbox build failed), 1 load error;
    30 reused, 2 regraded`: what the errors were in their parentheses (also `N sandbox
    errors`), what the session did not run after a semicolon (so it is not read as part of
    the errors)."""
    text = f"{counts.passed} passed, {counts.fail} failed, {counted(counts.error, 'error')}"
    kinds = (("over budget", counts.over_budget), ("sandbox build failed", counts.build_failed))
    apart = [f"{n} {what}" for what, n in kinds if n]
    if counts.sandbox_error:
        apart.append(counted(counts.sandbox_error, "sandbox error"))
    text += f" ({', '.join(apart)})" if apart else ""
    if counts.load_error:
        text += f", {counted(counts.load_error, 'load error')}"
    done = (("reused", counts.reused), ("regraded", counts.regraded))
    extra = [f"{n} {what}" for what, n in done if n]
    return text + (f"; {', '.join(extra)}" if extra else "")


def drift_lines(summary: Summary) -> list[str]:
    """A warning per captured environment name whose values differ across the attempts."""
    return [
        f"warning: environment drift: {d.name} differs across attempts: "
        + ", ".join(repr(v) for v in d.values)
        for d in summary.environment_drift
    ]


def _first_line(text: str) -> str:
    return text.partition("\n")[0]


# --- JUnit (one testcase per task) -------------------------------------------------------------


def write_junit(summary: Summary, rule: str, out: TextIO) -> None:
    """Per-task JUnit XML: the document and suites built with junitparser, then the testcases
    streamed one at a time (a whole tree of 10,000 tasks held 25 MiB and serialized slower).
    A run with variants has one suite per variant (and one for tasks with their own agent)."""
    suites = _suites(summary)
    kinds = [[_task_kind(task, rule) for task in suite.tasks] for suite in suites]
    durations = [[sum(a.duration for a in t.attempts) for t in suite.tasks] for suite in suites]
    document = _junit_document(summary, rule, suites, kinds, durations)
    parts = document.split("</testsuite>")
    out.write("<?xml version='1.0' encoding='utf-8'?>\n" + parts[0])
    properties: dict[tuple[int, int, int], str] = {}
    for index, suite in enumerate(suites):
        if index:
            out.write("</testsuite>" + parts[index])
        for task, kind, duration in zip(suite.tasks, kinds[index], durations[index], strict=True):
            out.write(_task_case(task, rule, kind, duration, properties))
        for error in suite.broken:
            out.write(_load_error_case(error, summary.dataset.name))
    out.write("</testsuite>" + parts[-1] + "\n")


@dataclass(frozen=True)
class _Suite:
    """One <testsuite>: the run's, a variant's, or the tasks with their own agent."""

    name: str
    variant: str | None
    metrics: Metrics | None
    counts: Counts | None
    tasks: list[TaskSummary]
    broken: list[LoadErrorSummary]


def _suites(summary: Summary) -> list[_Suite]:
    """The run as one suite; with variants, a suite per variant, then one (`agenteval`) for
    the tasks with their own agent and the tasks that could not be loaded, if any."""
    tasks, broken = summary.tasks, summary.load_errors
    if summary.variants is None:
        return [_Suite("agenteval", None, summary.metrics, summary.counts, tasks, broken)]
    suites = [
        _Suite(
            f"agenteval[{name}]",
            name,
            part.metrics,
            part.counts,
            [t for t in tasks if t.variant == name],
            [],
        )
        for name, part in summary.variants.items()
    ]
    own = [t for t in tasks if t.variant is None]
    return suites + ([_Suite("agenteval", None, None, None, own, broken)] if own or broken else [])


def _junit_document(
    summary: Summary,
    rule: str,
    suites: list[_Suite],
    kinds: list[list[str]],
    durations: list[list[float]],
) -> str:
    """<testsuites> with each suite's statistics and properties, no testcases yet."""
    xml = xunit2.JUnitXml()  # xunit2's <testsuites> has no `skipped`
    totals = [0, 0, 0]
    for suite, suite_kinds, times in zip(suites, kinds, durations, strict=True):
        suite_kinds = suite_kinds + ["error"] * len(suite.broken)
        element = xunit2.TestSuite(suite.name)
        for name, value in _suite_properties(summary, rule, suite):
            element.add_property(name, xml_safe(str(shown(value))))
        counts = (len(suite_kinds), suite_kinds.count("failure"), suite_kinds.count("error"))
        element.tests, element.failures, element.errors = counts
        element.skipped, element.time = 0, round(sum(times), 3)
        xml.add_testsuite(element)
        totals = [a + b for a, b in zip(totals, counts, strict=True)]
    xml.tests, xml.failures, xml.errors = totals
    xml.time = round(sum(sum(times) for times in durations), 3)
    return xml.tostring().decode()


def _suite_properties(summary: Summary, rule: str, suite: _Suite) -> list[tuple[str, Any]]:
    """The suite's <properties>: the run, and the suite's metrics and counts when it has them."""
    m, counts, narrowed = suite.metrics, suite.counts, narrowed_words(summary)
    found: list[tuple[str, Any]] = [
        ("run_id", summary.run_id),
        ("dataset", summary.dataset.name),
        *((("variant", suite.variant),) if suite.variant else ()),
        ("status", summary.status),
        ("task_rule", rule),
    ]
    if m is not None:
        ci95 = m.pass_at_1_ci95
        found += [
            ("n_tasks", m.n_tasks),
            ("pass_at_1", m.pass_at_k.get("1")),
            ("pass_at_k", json.dumps(rounded_values(m.pass_at_k))),
            ("pass_power_k", json.dumps(rounded_values(m.pass_power_k))),
            ("pass_at_1_stderr", m.pass_at_1_stderr),
            ("pass_at_1_ci95", json.dumps([shown(v) for v in ci95] if ci95 else None)),
        ]
    if counts is not None:
        dumped = counts.model_dump(by_alias=True, exclude={"error_classes"})
        found += [(f"count_{k}", v) for k, v in dumped.items()]
        found += [(f"errors_{k}", n) for k, n in (counts.error_classes or {}).items()]
    return found + ([("narrowed", narrowed)] if narrowed else [])


def _task_kind(task: TaskSummary, rule: str) -> str:
    """The task's JUnit result: "" when it meets the rule, else "failure" or "error"."""
    if task_passes(task, rule):
        return ""
    errored = all(a.status == "error" for a in task.attempts if a.status != "pass")
    return "error" if errored else "failure"


def _task_case(
    task: TaskSummary,
    rule: str,
    kind: str,
    duration: float,
    properties: dict[tuple[int, int, int], str],
) -> str:
    """One task's <testcase>, as text.

    The properties depend only on n, c and errors, so each distinct <properties> element is
    built and serialized once (`properties` memoizes them), and only failing tasks need an
    element of their own: per-case trees made writing junit.xml the slowest report.
    """
    key = (task.n, task.c, task.errors)
    props = properties.get(key)
    if props is None:
        props = properties[key] = ET.tostring(_properties(task), encoding="unicode")
    result = ""
    if kind:
        n, c = key[:2]
        element = ET.Element(kind, message=f"{c}/{n} attempts passed; task rule {rule!r} not met")
        bad = [a for a in task.attempts if a.status != "pass"]
        lines = [f"attempt {a.index} {a.status}: {excerpt(a.reason, 500)}" for a in bad]
        element.text = xml_safe("\n".join(lines))
        result = ET.tostring(element, encoding="unicode")
    name, classname = quoteattr(xml_safe(task.task_id)), quoteattr(xml_safe(task.dataset))
    return (
        f'<testcase name={name} classname={classname} time="{duration:.3f}">'
        f"{props}{result}</testcase>"
    )


def _load_error_case(error: LoadErrorSummary, dataset: str) -> str:
    """A task that could not be loaded: an <error> testcase named after it, whose message is
    the `file:line: at field: problem` line, so CI counts a broken task file as an error."""
    message = error.message
    element = ET.Element("error", message=xml_safe(_first_line(message)), type="load error")
    element.text = xml_safe(message)
    name = quoteattr(xml_safe(error.name))
    classname = quoteattr(xml_safe(error.dataset or dataset))
    return (
        f'<testcase name={name} classname={classname} time="0.000">'
        f"{ET.tostring(element, encoding='unicode')}</testcase>"
    )


def _properties(task: TaskSummary) -> ET.Element:
    element = ET.Element("properties")
    for name, value in (
        ("n", task.n),
        ("c", task.c),
        ("errors", task.errors),
        ("pass_at_1", task.pass_at_k.get("1")),
        ("pass_at_k", json.dumps(rounded_values(task.pass_at_k))),
        ("pass_power_k", json.dumps(rounded_values(task.pass_power_k))),
    ):
        ET.SubElement(element, "property", name=name, value=str(shown(value)))
    return element


# --- terminal ----------------------------------------------------------------------------------


def terminal_lines(summary: Summary, verbose: bool, rule: str) -> list[str]:
    """The agenteval section at the end of a pytest run."""
    m, counts = summary.metrics, summary.counts
    ds = summary.dataset
    narrowed = narrowed_words(summary)
    lines = [
        f"run {summary.run_id} ({_status_words(summary)}) · dataset {ds.name} {ds.version} · "
        f"{counted(_n_tasks(summary), 'task')}, {attempts_words(summary)}",
        *([f"{narrowed}: the metrics cover these attempts only"] if narrowed else []),
        _counts_line(counts) + (f"; {counts.run} run now" if counts.run is not None else ""),
        *_class_lines(counts),
        *retry_lines(summary),
        *_agent_error_lines(summary.agent_errors),
    ]
    if summary.variants is not None or m is None:
        lines += leaderboard_terminal(summary, verbose)
    elif m.pass_at_k:
        lines += [
            "pass@k "
            + "  ".join(f"@{k} {fmt(v)}" for k, v in m.pass_at_k.items())
            + _tasks_per_k(m),
            "pass^k " + "  ".join(f"^{k} {fmt(v)}" for k, v in m.pass_power_k.items()),
        ]
    else:
        lines.append("pass@k n/a: no attempt recorded")
    if summary.variants is None and m is not None and m.pass_at_k.get("1") is not None:
        lines.append(_interval(m))
    broken = summary.load_errors
    if broken:
        lines.append(f"{counted(len(broken), 'task')} could not be loaded (not evaluated):")
        shown_errors = broken if verbose else broken[:LOWEST_SHOWN]
        lines += [f"  {e.name}: {_first_line(e.message)}" for e in shown_errors]
        if len(broken) > len(shown_errors):
            lines.append(f"  ... {len(broken) - len(shown_errors)} more (-v shows all)")
    lines += drift_lines(summary)
    usage = _usage_line(summary.totals)
    lines += [usage] if usage else []
    lines += spend_lines(summary)
    for name, p in (summary.providers or {}).items():
        lines.append(
            f"provider {name}: limit {p.limit} of {p.max_in_flight} in flight, "
            f"{p.rate_limited} 429s"
        )
    if summary.variants is not None:
        lines += tags_terminal(summary, verbose)
    else:
        lines += _terminal_tags(summary.tags, verbose)
    for block in _regressions(summary):
        lines += regression_lines(block, verbose)
    tasks = sorted(summary.tasks, key=_pass_rate)
    shown = tasks if verbose else [t for t in tasks if t.c < t.n][:LOWEST_SHOWN]
    if shown:
        lines.append("tasks, lowest pass rate first:" if not verbose else "tasks:")
        for t in shown:
            mark = "" if task_passes(t, rule) else "  ✗ rule " + rule
            errors = f" ({counted(t.errors, 'error')})" if t.errors else ""
            variant = f"[{t.variant}]" if t.variant else ""
            lines.append(f"  {t.c}/{t.n}  {t.task_id}{variant}{errors}{mark}")
        hidden = len([t for t in tasks if t.c < t.n]) - len(shown)
        if hidden > 0 and not verbose:
            lines.append(f"  ... {hidden} more below 100% (-v shows all tasks)")
    return lines + store_damage_lines(summary.store_problems)


def _status_words(summary: Summary) -> str:
    """The run's status for the heading: a run whose attempts all ended is not `complete`
    while task files did not load (they were never evaluated, and they fail the gate)."""
    broken = len(summary.load_errors)
    if summary.status != "complete" or not broken:
        return summary.status
    return f"complete except {counted(broken, 'task')} that could not be loaded, listed below"


def store_damage_lines(problems: Sequence[StoreProblemSummary | StoreProblem]) -> list[str]:
    """One line per piece of store damage: where, what is wrong, what happens."""
    return [f"store damage: {_problem(p).render()}" for p in problems]


def _problem(problem: StoreProblemSummary | StoreProblem) -> StoreProblem:
    if isinstance(problem, StoreProblem):
        return problem
    return StoreProblem(problem.where, problem.problem, problem.effect)
