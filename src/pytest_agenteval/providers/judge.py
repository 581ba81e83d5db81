"""The LLM judge: the prompt that asks a model to score an output against a rubric, and the
reading of its reply (`{"score": 0..1, "reason": ...}`) into a verdict."""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.errors import AgentError, GraderError, GraderSpecError
from ..core.llm import JudgeOptions
from ..core.model import Verdict
from ..core.records import usage_json
from ..core.text import excerpt
from .client import INSTALL, Connection, ProviderError, api_key, load_sdk

SYSTEM = (
    "You are a strict, fair grader. Score how well the OUTPUT satisfies the RUBRIC, from 0 "
    "(not at all) to 1 (fully). Reply with one JSON object and nothing else: "
    '{"score": <a number from 0 to 1>, "reason": "<one sentence>"}'
)
DEFAULT_TIMEOUT = 60.0
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_connections: dict[tuple[str, str], Connection] = {}
"""One client per judge setting and key, shared by every task of the session."""


def prompt(rubric: str, task_input: Any, expected: Any, output: str) -> list[dict[str, str]]:
    """The messages sent to the judge: the rubric first, then what was asked and answered."""
    asked = task_input if isinstance(task_input, str) else json.dumps(task_input)
    parts = [f"RUBRIC:\n{rubric}", f"TASK INPUT:\n{asked}"]
    if expected is not None:
        parts.append(f"REFERENCE ANSWER:\n{expected}")
    parts.append(f"OUTPUT:\n{output}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_reply(text: str) -> tuple[float, str]:
    """(score, reason) from the judge's reply: a JSON object, bare or inside other text.
    Raises ValueError when there is none or its score is not a number from 0 to 1."""
    found = _OBJECT.search(text)
    try:
        data = json.loads(found[0] if found else text)
    except ValueError:
        raise ValueError("it holds no JSON object") from None
    score = data.get("score") if isinstance(data, dict) else None
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        raise ValueError(f"its score is {score!r}, not a number from 0 to 1")
    return float(score), str(data.get("reason") or "")


def check_options(options: JudgeOptions) -> None:
    """Raise GraderSpecError for what a judge cannot do without: the SDK and a model."""
    if not options.model:
        raise GraderSpecError(
            "judge needs a model",
            option="model",
            hint="set `model:` on the grader or in the manifest's `judge:` block",
        )
    if load_sdk() is None:
        raise GraderSpecError("the judge grader needs the openai package", hint=INSTALL)


def judge(options: JudgeOptions, task_input: Any, expected: Any, output: str) -> Verdict:
    """Ask the judge; its verdict keeps the prompt, the raw reply and the usage. A judge that
    cannot answer (errors after retries, an unreadable reply) raises GraderError."""
    connection = _connection(options)
    messages = prompt(options.rubric, task_input, expected, output)
    try:
        reply = connection.complete(messages)
    except ProviderError as exc:
        raise GraderError(f"judge: {exc.message}", detail=exc.detail) from None
    try:
        score, reason = parse_reply(reply.text)
    except ValueError as exc:
        raise GraderError(
            f"judge: its reply cannot be read: {exc}",
            detail=f"reply: {excerpt(reply.text, 500)!r}",
        ) from None
    details = {
        "model": reply.model,
        "prompt": messages,
        "reply": reply.text,
        "usage": usage_json(reply.usage),
        "retries": reply.retries,
    }
    passed = score >= options.threshold
    shown = f"score {score:g} ({'>=' if passed else '<'} {options.threshold:g})"
    return Verdict("judge", passed, f"{shown}: {reason}" if reason else shown, score, details)


def _connection(options: JudgeOptions) -> Connection:
    key = api_key(options)
    if key is None:
        raise GraderError(
            f"judge: the environment variable {options.key_env} (api_key_env) holding the "
            "API key is not set",
            detail=f"Hint: export {options.key_env}=...; a local server takes any value",
        )
    settings = options.model_copy(
        update={
            "temperature": 0.0 if options.temperature is None else options.temperature,
            "timeout": options.timeout or DEFAULT_TIMEOUT,
        }
    )
    name = settings.model_dump_json(exclude={"rubric", "threshold"})
    found = _connections.get((name, key))
    if found is None:
        sdk = load_sdk()
        if sdk is None:  # checked when the grader was built; kept for type checkers
            raise AgentError("the judge grader needs the openai package", detail=INSTALL)
        found = _connections[(name, key)] = Connection(sdk, settings, key, is_async=False)
    return found
