"""The `openai` agent kind: a task's input sent to an OpenAI-compatible chat endpoint.

`agent: {openai: {model: ..., base_url: ..., system: ...}}`. Built once per distinct spec by
the process's `AgentResolver` (one async client, so concurrent attempts share the executor's
event loop and connections).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..core.errors import AgentUnavailable, did_you_mean
from ..core.llm import OpenAIAgentOptions
from ..core.model import AgentResult, Task
from .client import INSTALL, Connection, api_key, load_sdk, mask_json


class OpenAIAgent:
    """Calls the chat-completions endpoint once per attempt (retries aside)."""

    def __init__(self, options: OpenAIAgentOptions, connection: Connection) -> None:
        self.options = options
        self.connection = connection

    async def __call__(self, task: Task) -> AgentResult:
        messages = self.messages(task.input)
        limit = task.budget.max_tokens if task.budget else None  # the server stops there
        started, t0 = time.time(), time.perf_counter()
        reply = await self.connection.complete_async(messages, limit)
        latency = time.perf_counter() - t0
        trace = task.trace  # the trace: the messages sent, the call, the reply
        for message in mask_json(messages):
            trace.message(message.get("role", "user"), message.get("content"), at=started)
        usage = reply.usage
        trace.model_call(
            provider="openai",
            request_model=self.options.model,
            model=reply.model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            cost=usage.cost,
            latency=latency,
            finish_reason=reply.finish_reason,
            started_at=started,
            retries=reply.retries,
        )
        trace.message("assistant", reply.text)
        return AgentResult(
            output=reply.text,
            usage=reply.usage,
            call={
                "model": reply.model,
                "finish_reason": reply.finish_reason,
                "retries": reply.retries,
            },
        )

    def messages(self, value: Any) -> list[dict[str, Any]]:
        """A string is the user message (after `system`); chat messages are sent as they are;
        a mapping is sent as JSON text."""
        if isinstance(value, list):
            return [dict(m) for m in value]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        system = [{"role": "system", "content": self.options.system}] if self.options.system else []
        return [*system, {"role": "user", "content": text}]


def make_openai_agent(options: dict[str, Any], dataset_root: Path) -> OpenAIAgent:
    """The agent an `{openai: {...}}` spec names; raises AgentUnavailable for bad options, a
    missing SDK, or a key variable that is not set."""
    settings = agent_options(options)
    sdk = load_sdk()
    if sdk is None:
        raise AgentUnavailable(
            "the openai agent needs the openai package, which is not installed", hint=INSTALL
        )
    key = api_key(settings)
    if key is None:
        raise AgentUnavailable(
            f"the environment variable {settings.key_env} (api_key_env) holding the API key "
            "is not set",
            hint=f"export {settings.key_env}=...; a local server that needs no key takes any value",
        )
    return OpenAIAgent(settings, Connection(sdk, settings, key))


def agent_options(options: dict[str, Any]) -> OpenAIAgentOptions:
    """The validated options; the first problem as an AgentUnavailable naming the option."""
    try:
        return OpenAIAgentOptions.model_validate(options)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        option = ".".join(str(p) for p in error["loc"]) or "options"
        if error["type"] == "extra_forbidden":
            fields = OpenAIAgentOptions.model_fields
            hint = did_you_mean(option, fields) or "options: " + ", ".join(fields)
            raise AgentUnavailable(f"openai agent: unknown option {option!r}", hint=hint) from None
        raise AgentUnavailable(f"openai agent: at {option}: {error['msg']}") from None
