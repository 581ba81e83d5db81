"""The provider seam's contract: one chat call, in a form no API owns.

Every model call (the `openai` and `react` agents, judges, a user's agent through `task.llm()`)
goes through a `ChatClient`. Messages, tools and replies are written here once; each provider
kind (OpenAI's chat completions, Anthropic's Messages API) translates them to and from its own
wire format, so an agent loop never sees which API answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and its arguments' JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """A JSON schema of type `object` (properties, required)."""


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One tool call the model asked for; `id` pairs it with its result."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    """The arguments decoded from JSON (an API that sends a string has it parsed)."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message of a conversation.

    `assistant` messages may carry the tool calls the model asked for; a `tool` message is one
    call's result, naming the call by `tool_call_id` (`is_error`: the tool failed, which the
    Anthropic API is told)."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolRequest, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ChatReply:
    """What one call answered, with what it used.

    `cost` is what the call cost when known (a cached answer costs 0 against caps; its original
    cost is `cached_cost`)."""

    text: str
    tool_calls: tuple[ToolRequest, ...] = ()
    finish_reason: str | None = None
    model: str | None = None
    """The model that answered, as the provider names it."""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None
    cost: float | None = None
    cached: bool = False
    cached_cost: float | None = None
    cache_missed: bool = False
    """The model cache was asked and had no answer: the request was sent."""
    latency: float = 0.0
    retries: int = 0
    """Requests retried before this answer (429s, 5xx, connection errors)."""
    provider: str | None = None
    """The provider that answered (its name in the manifest, or the API kind)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Provider-specific fields worth keeping (e.g. Anthropic's cache write tokens)."""

    def message(self) -> ChatMessage:
        """This reply as the assistant message a conversation continues with."""
        return ChatMessage("assistant", self.text, self.tool_calls)


MessageLike = ChatMessage | Mapping[str, Any]
"""A message as a `ChatMessage` or as OpenAI-style dict (`{"role": ..., "content": ...}`)."""


class ChatClient(Protocol):
    """One provider's chat call, with its limits, reservation, caps, retries and cache.

    `task.llm(provider)` returns one bound to the attempt (its usage and cost are summed into
    the attempt's record, each call is a `model_call` trace event)."""

    async def achat(
        self,
        messages: Sequence[MessageLike],
        *,
        model: str | None = None,
        tools: Sequence[ToolSpec] = (),
        **params: Any,
    ) -> ChatReply: ...

    def chat(
        self,
        messages: Sequence[MessageLike],
        *,
        model: str | None = None,
        tools: Sequence[ToolSpec] = (),
        **params: Any,
    ) -> ChatReply: ...
