"""The two wire formats a provider speaks: OpenAI's chat completions and Anthropic's Messages.

Each kind turns the seam's messages and tools (`core.chat`) into one request body and one
reply body back into a `ChatReply`. Replies are read as plain JSON with a few lookups, never
validated whole (that costs more CPU than the HTTP exchange). A reply that is not what the
API sends raises `WireError`, which the provider reports as an unreadable reply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..core.chat import ChatMessage, ChatReply, MessageLike, ToolRequest, ToolSpec
from ..core.text import excerpt

ANTHROPIC_VERSION = "2023-06-01"
ANTHROPIC_MAX_TOKENS = 4096
"""Anthropic's API requires `max_tokens`; this is sent when nothing sets it."""


class WireError(Exception):
    """A reply body that is not what the API answers."""


class Wire(Protocol):
    """One API's request and reply shapes."""

    kind: str

    def url(self, base_url: str) -> str: ...

    def models_url(self, base_url: str) -> str: ...

    def headers(self, key: str) -> dict[str, str]: ...

    def body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        params: Mapping[str, Any],
    ) -> dict[str, Any]: ...

    def reply(self, data: Any, **known: Any) -> ChatReply:
        """The reply `data` says, with what the caller `known`s of the call (its latency,
        retries, provider)."""
        ...


def as_message(value: MessageLike) -> ChatMessage:
    """A message given as a ChatMessage or an OpenAI-style dict (tool calls included)."""
    if isinstance(value, ChatMessage):
        return value
    calls = tuple(_openai_call(c) for c in value.get("tool_calls") or ())
    content = value.get("content")
    if isinstance(content, list):  # OpenAI content parts: keep their text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ChatMessage(
        value.get("role", "user"),
        "" if content is None else str(content),
        calls,
        value.get("tool_call_id"),
        bool(value.get("is_error")),
    )


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if not raw:
        return {}
    try:
        found = json.loads(raw)
    except (TypeError, ValueError):
        return {"_raw": str(raw)}  # the model wrote no JSON: the loop may tell it so
    return found if isinstance(found, dict) else {"_raw": found}


def _openai_call(call: Mapping[str, Any]) -> ToolRequest:
    function = call.get("function") or {}
    return ToolRequest(
        str(call.get("id") or ""),
        str(function.get("name") or ""),
        _arguments(function.get("arguments")),
    )


class OpenAIWire:
    """`POST {base_url}/chat/completions` (base_url ends in `/v1`)."""

    kind = "openai"

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/chat/completions"

    def models_url(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/models"

    def headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}", "content-type": "application/json"}

    def body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        params: Mapping[str, Any],
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": [_openai_message(m) for m in messages]}
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in tools
            ]
        body.update(params)
        return body

    def reply(self, data: Any, **known: Any) -> ChatReply:
        try:
            choice = data["choices"][0]
            message = choice["message"]
            calls = tuple(_openai_call(c) for c in message.get("tool_calls") or ())
            usage = data.get("usage") or {}
            details = usage.get("prompt_tokens_details") or {}
            return ChatReply(
                text=str(message.get("content") or ""),
                tool_calls=calls,
                finish_reason=_str(choice.get("finish_reason")),
                model=_str(data.get("model")),
                input_tokens=_count(usage.get("prompt_tokens")),
                output_tokens=_count(usage.get("completion_tokens")),
                cached_input_tokens=_count(details.get("cached_tokens")),
                **known,
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise WireError(f"not a chat completion ({type(exc).__name__}: {exc})") from None


def _openai_message(m: ChatMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["content"] = m.content or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
            }
            for c in m.tool_calls
        ]
    return out


class AnthropicWire:
    """`POST {base_url}/v1/messages` (base_url the API's root, `/v1` or not)."""

    kind = "anthropic"

    def _root(self, base_url: str) -> str:
        root = base_url.rstrip("/")
        return root if root.endswith("/v1") else root + "/v1"

    def url(self, base_url: str) -> str:
        return self._root(base_url) + "/messages"

    def models_url(self, base_url: str) -> str:
        return self._root(base_url) + "/models"

    def headers(self, key: str) -> dict[str, str]:
        return {
            "x-api-key": key,
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
        }

    def body(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        params: Mapping[str, Any],
    ) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        turns: list[dict[str, Any]] = []
        for m in messages:
            if m.role != "system":
                _append_turn(turns, m)
        body: dict[str, Any] = {"model": model, "messages": turns}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in tools
            ]
        body.update(params)
        body.setdefault("max_tokens", ANTHROPIC_MAX_TOKENS)
        return body

    def reply(self, data: Any, **known: Any) -> ChatReply:
        try:
            blocks = data["content"]
            text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            calls = tuple(
                ToolRequest(str(b["id"]), str(b["name"]), _arguments(b.get("input")))
                for b in blocks
                if b.get("type") == "tool_use"
            )
            usage = data.get("usage") or {}
            read = _count(usage.get("cache_read_input_tokens"))
            write = _count(usage.get("cache_creation_input_tokens"))
            fresh = _count(usage.get("input_tokens"))
            total = None if fresh is None else fresh + (read or 0) + (write or 0)
            return ChatReply(
                text=text,
                tool_calls=calls,
                finish_reason=_str(data.get("stop_reason")),
                model=_str(data.get("model")),
                input_tokens=total,
                output_tokens=_count(usage.get("output_tokens")),
                cached_input_tokens=read,
                extra={"cache_write_tokens": write} if write else {},
                **known,
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise WireError(f"not a Messages API reply ({type(exc).__name__}: {exc})") from None


def _append_turn(turns: list[dict[str, Any]], m: ChatMessage) -> None:
    """Anthropic alternates user and assistant turns: tool results are user content blocks
    (`is_error` when the tool failed), and consecutive messages of one role share one turn.
    The API refuses a turn with empty content: an empty assistant reply is left out."""
    if m.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": m.tool_call_id or "",
            "content": m.content,
        }
        if m.is_error:
            block["is_error"] = True
        _join(turns, "user", [block])
        return
    blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
    if m.role == "assistant" and m.tool_calls:
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
            for c in m.tool_calls
        ]
        _join(turns, "assistant", blocks)
    elif m.content or m.role != "assistant":
        _join(turns, m.role, m.content)


def _join(turns: list[dict[str, Any]], role: str, content: str | list[dict[str, Any]]) -> None:
    """Add `content` as a turn of `role`, or to the last turn when it is of that role (its
    content then a list of blocks)."""
    last = turns[-1] if turns else None
    if last is None or last["role"] != role:
        turns.append({"role": role, "content": content})
    else:
        last["content"] = _blocks(last["content"]) + _blocks(content)


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _count(value: Any) -> int | None:
    """A token count of the reply's usage: absent is None, anything but a count unreadable."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise WireError(f"a token count is not a count: input_value={excerpt(repr(value), 200)}")


WIRES: dict[str, Wire] = {"openai": OpenAIWire(), "anthropic": AnthropicWire()}
