"""Attempt records as plain JSON types (they travel on pytest reports), and their keys."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from .model import RECORD_SCHEMA, AgentResult, Key, Verdict
from .text import clean_text, json_safe

ITEM_NAME_RE = re.compile(r"^(?P<task_id>.+)\[attempt-(?P<attempt>\d+)\](?:@.*)?$")


def item_name(task_id: str, attempt: int) -> str:
    """The pytest item name of one attempt: `<task_id>[attempt-<i>]`."""
    return f"{task_id}[attempt-{attempt}]"


def parse_item_name(nodeid: str) -> tuple[str, int] | None:
    """(task id, attempt) from a node id or item name; tolerates xdist's `@group` suffix."""
    match = ITEM_NAME_RE.match(nodeid.rpartition("::")[2])
    return (match["task_id"], int(match["attempt"])) if match else None


def attempt_seed(key: Key) -> int:
    """A deterministic 32-bit seed per (dataset, task, attempt)."""
    digest = hashlib.sha256(f"{key[0]}\0{key[1]}\0{key[2]}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def attempt_score(verdicts: list[Verdict]) -> float:
    """Mean of the graders' scores (a grader without a score counts 1 if passed, else 0)."""
    if not verdicts:
        return 0.0
    total = 0.0
    for v in verdicts:
        total += v.score if v.score is not None else (1.0 if v.passed else 0.0)
    return total / len(verdicts)


def build_record(
    *,
    key: Key,
    digest: str,
    run_digest: str,
    agent: dict[str, Any],
    tags: list[str],
    status: str,
    verdicts: list[Verdict],
    result: AgentResult | None,
    started_at: float,
    duration: float,
    error: str | None = None,
    error_type: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    """One attempt as an `agenteval.record/1` dict of plain JSON types."""
    usage = result.usage if result is not None else None
    return {
        "schema": RECORD_SCHEMA,
        "dataset": key[0],
        "task_id": key[1],
        "attempt": key[2],
        "digest": digest,
        "run_digest": run_digest,
        "agent": agent,
        "tags": tags,
        "status": status,
        "score": attempt_score(verdicts) if status != "error" else 0.0,
        "verdicts": [v.as_dict() for v in verdicts],
        "output": clean_text(result.output) if result is not None else None,
        "usage": usage.model_dump() if usage is not None else None,
        "duration": duration,
        "started_at": started_at,
        "finished_at": started_at + duration,
        "error": clean_text(error) if error else None,
        "error_type": error_type,
        "phase": phase,
        "transcript": json_safe(result.transcript) if result and result.transcript else None,
        "artifacts": json_safe(result.artifacts) if result and result.artifacts else None,
        "previous": [],
    }


def result_from_record(record: dict[str, Any]) -> AgentResult:
    """The agent's answer as recorded, for regrading without calling the agent."""
    return AgentResult.model_validate(
        {
            "output": record.get("output") or "",
            "usage": record.get("usage"),
            "transcript": record.get("transcript"),
            "artifacts": record.get("artifacts"),
        }
    )


def junit_properties(
    task_id: str, attempt: int, r: dict[str, Any], reused: bool
) -> list[tuple[str, Any]]:
    """Per-attempt JUnit properties: task_id, attempt, status, score, duration, tokens, cost.

    `r` is the attempt's record (or replay data). Reports keep their properties all session
    long, so the ones that repeat across attempts share one tuple.
    """
    usage = r.get("usage") or r
    props: list[tuple[str, Any]] = [
        ("task_id", task_id),
        _shared("attempt", attempt),
        _shared("status", r["status"]),
        _shared("score", float(round(r.get("score") or 0.0, 4))),
        ("duration", round(r.get("duration") or 0.0, 4)),
    ]
    tokens = [usage.get("input_tokens"), usage.get("output_tokens")]
    if any(t is not None for t in tokens):
        props.append(("tokens", sum(t or 0 for t in tokens)))
    if usage.get("cost") is not None:
        props.append(("cost", usage["cost"]))
    if reused:
        props.append(_shared("reused", "true"))
    return props


_SHARED_PROPERTIES: dict[tuple[str, Any], tuple[str, Any]] = {}


def _shared(name: str, value: Any) -> tuple[str, Any]:
    prop = (name, value)
    return _SHARED_PROPERTIES.setdefault(prop, prop)
