"""The `openai` agent kind: a task's input sent to an OpenAI-compatible chat endpoint.

`agent: {openai: {model: ..., base_url: ..., system: ...}}`. Built once per distinct spec by
the process's `AgentResolver` (one async client, so concurrent attempts share the executor's
event loop and connections).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..core.chat import ChatClient
from ..core.errors import AgentUnavailable, agent_options
from ..core.llm import OpenAIAgentOptions
from ..core.model import AgentResult, Task
from ..core.text import json_text
from .bound import BoundClient, usage_of
from .client import api_key, mask_json
from .seam import provider, route_of


class OpenAIAgent:
    """Calls the chat-completions endpoint once per attempt (retries aside), through the
    provider its settings name (`provider:`) or the implicit one of its base_url and key."""

    blocks_loop = False
    """It only awaits (the provider seam's I/O): the main thread may run the loop its calls
    are on (`LoopDriver`)."""

    def __init__(self, options: OpenAIAgentOptions) -> None:
        self.options = options

    def client(self, task: Task) -> ChatClient:
        """The attempt's client: the manifest's provider by name, else the implicit one; a
        Task made by hand (no run) gets the implicit one, unbound to caps."""
        found = task._llm_for(self.options)
        if found is None:
            return BoundClient(provider(route_of(None, settings=self.options)), task.trace)
        return found

    async def __call__(self, task: Task) -> AgentResult:
        messages = self.messages(task.input)
        started = time.time()
        trace = task.trace  # the trace: the messages sent, the call, the reply
        for message in mask_json(messages):
            trace.message(message.get("role", "user"), message.get("content"), at=started)
        reply = await self.client(task).achat(
            messages, model=self.options.model, **self.params(task)
        )
        trace.message("assistant", reply.text)
        usage = usage_of(reply)
        return AgentResult(
            output=reply.text,
            usage=usage,
            call={
                "model": reply.model,
                "finish_reason": reply.finish_reason,
                "retries": reply.retries,
            },
        )

    def params(self, task: Task) -> dict[str, Any]:
        """The request's parameters: `params` as they are, temperature, and the least of
        `max_tokens` and the task's token budget (the server stops there)."""
        s = self.options
        out: dict[str, Any] = dict(s.params or {})
        if s.temperature is not None:
            out["temperature"] = s.temperature
        budget = task.budget.max_tokens if task.budget else None
        limits = [n for n in (s.max_tokens, budget) if n is not None]
        if limits:
            out["max_tokens"] = min(limits)
        return out

    def messages(self, value: Any) -> list[dict[str, Any]]:
        """A string is the user message (after `system`); chat messages are sent as they are;
        a mapping is sent as JSON text."""
        if isinstance(value, list):
            return [dict(m) for m in value]
        text = value if isinstance(value, str) else json_text(value)
        system = [{"role": "system", "content": self.options.system}] if self.options.system else []
        return [*system, {"role": "user", "content": text}]


def make_openai_agent(options: dict[str, Any], dataset_root: Path) -> OpenAIAgent:
    """The agent an `{openai: {...}}` spec names; raises AgentUnavailable for bad options or
    a key variable that is not set."""
    settings = agent_options("openai", OpenAIAgentOptions, options)
    key = api_key(settings) if not settings.provider else "set"
    if key is None:
        raise AgentUnavailable(
            f"the environment variable {settings.key_env} (api_key_env) holding the API key "
            "is not set",
            hint=f"export {settings.key_env}=...; a local server that needs no key takes any value",
        )
    return OpenAIAgent(settings)
