"""Chat completions through the official `openai` SDK (an optional extra), with our retries.

The SDK is imported only when a dataset uses a provider. One `Connection` per agent spec or
judge setting holds the client (async for agents, so many calls share the executor's loop;
judges, which grade on pytest's threads, run theirs on a background loop of this module). Each
request has a wall-clock deadline, `timeout`: the SDK's own timeout is per read, so a server
that dribbles its reply would never hit it. The API key is read from the environment once and
never leaves this module: whatever a connection returns or raises has it masked (`mask`).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from ..core.errors import AgentError
from ..core.llm import ModelSettings
from ..core.model import Usage
from ..core.text import excerpt
from .retry import DEFAULT_BACKOFF, DEFAULT_RETRIES, RetryPolicy, retryable, what_to_check

INSTALL = "pip install 'pytest-agenteval[openai]'"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
_UNPARSEABLE = "unparseable"
SHORTEST_MASKED = 12
"""Runs of this many characters of a key are masked wherever they appear (a server's excerpt
or pydantic's abbreviation of the key would leave parts of it)."""
_keys: set[str] = set()
"""Every key a connection of this process holds: `mask` hides all of them."""
_background: tuple[int, asyncio.AbstractEventLoop] | None = None
"""(pid, loop) where sync callers' requests run, so a deadline can cancel them."""
_background_lock = threading.Lock()


class RequestTimeout(Exception):
    """A request that did not end within its wall-clock deadline (a retryable failure)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete reply within {seconds:g} s (the `timeout` setting)")


class ProviderError(AgentError):
    """A provider call that failed for good: refused, out of retries, or an unreadable reply.
    Infrastructure trouble, so the attempt is an *error*, never a failure."""

    error_type = "ProviderError"
    status: int | None = None
    """The HTTP status that ended the call, when one did."""


def register_key(key: str) -> None:
    """A key this process holds: `mask` hides it from now on."""
    _keys.add(key)


def load_sdk() -> ModuleType | None:
    """The `openai` module, or None when the extra is not installed."""
    try:
        return importlib.import_module("openai")
    except ImportError:
        return None


@dataclass(frozen=True, slots=True)
class Reply:
    """One chat completion as we keep it."""

    text: str
    model: str | None
    finish_reason: str | None
    usage: Usage
    retries: int


@dataclass
class Connection:
    """A client for one setting: the request it sends and how its failures read."""

    sdk: ModuleType
    settings: ModelSettings
    key: str = field(repr=False)
    client: Any = field(init=False)
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        _keys.add(self.key)
        self.client = self._make_client()
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the async client's connections belong to."""
        self.policy = RetryPolicy(
            DEFAULT_RETRIES if self.settings.retries is None else self.settings.retries,
            DEFAULT_BACKOFF if self.settings.backoff is None else self.settings.backoff,
        )

    def _make_client(self) -> Any:
        timeout = self.settings.timeout
        return self.sdk.AsyncOpenAI(
            api_key=self.key,
            base_url=self.settings.base_url,
            max_retries=0,  # we retry, to count retries and honour our backoff
            **({"timeout": timeout} if timeout is not None else {}),
        )

    def _async_client(self) -> Any:
        """The async client of the running loop: its connections cannot move between loops
        (a later session in this process, a forked child of `--agenteval-isolate`)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                self.client = self._make_client()
            self._loop = loop
        return self.client

    @property
    def base_url(self) -> str:
        return str(self.settings.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)

    def request(
        self, messages: list[dict[str, Any]], max_tokens: int | None = None
    ) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create`; `params` travel as they are.
        `max_tokens` (a task's budget) lowers the settings' own."""
        s = self.settings
        kwargs: dict[str, Any] = {"model": s.model, "messages": messages}
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        limits = [n for n in (s.max_tokens, max_tokens) if n is not None]
        if limits:
            kwargs["max_tokens"] = min(limits)
        if s.params:
            kwargs["extra_body"] = dict(s.params)
        return kwargs

    async def complete_async(
        self, messages: list[dict[str, Any]], max_tokens: int | None = None
    ) -> Reply:
        """One completion, retried as the policy says (an async client's)."""
        retries = 0
        while True:
            try:
                return self.reply(await self._request(messages, max_tokens), retries)
            except Exception as exc:
                wait = self._next(exc, retries)
            await asyncio.sleep(wait)
            retries += 1

    async def _request(self, messages: list[dict[str, Any]], max_tokens: int | None) -> Any:
        """One request, ended at the `timeout` deadline however the server trickles."""
        request = self.request(messages, max_tokens)
        call = self._async_client().chat.completions.create(**request)
        seconds = self.settings.timeout
        if seconds is None:
            return await call
        try:
            return await asyncio.wait_for(call, seconds)
        except TimeoutError:
            raise RequestTimeout(seconds) from None

    def complete(self, messages: list[dict[str, Any]]) -> Reply:
        """One completion for a sync caller: run on the background loop, where its deadline
        can cancel it; a caller interrupted (Ctrl-C) cancels it too."""
        future = asyncio.run_coroutine_threadsafe(self.complete_async(messages), _loop())
        try:
            return future.result()
        finally:
            future.cancel()

    def _next(self, exc: Exception, retries: int) -> float:
        """Seconds to wait before the next try; raises ProviderError when there is
        none (refused, out of retries, or a reply that is not a completion)."""
        if isinstance(exc, ProviderError):
            raise exc
        status, retry_after = self._classify(exc)
        if not isinstance(status, str) and retryable(status) and retries < self.policy.retries:
            return self.policy.delay(retries, retry_after, self.rng)
        raise self.failure(exc, status, retries) from None

    def _classify(self, exc: Exception) -> tuple[int | str | None, str | None]:
        if isinstance(exc, self.sdk.APIStatusError):
            return exc.status_code, exc.response.headers.get("retry-after")
        if isinstance(exc, self.sdk.APIConnectionError | RequestTimeout):
            return None, None
        return _UNPARSEABLE, None

    def failure(self, exc: Exception, status: int | str | None, retries: int) -> ProviderError:
        """The error a failed call ends with: what happened, and what to check."""
        model = str(self.settings.model)
        after = f" (after {retries} retries)" if retries else ""
        if status == _UNPARSEABLE:
            what = f"the reply is not a chat completion: {type(exc).__name__}: {exc}"
            hint = f"is {self.base_url} an OpenAI-compatible API (…/v1)?"
        elif isinstance(exc, RequestTimeout):
            what = str(exc)
            hint = "the server answers too slowly: raise `timeout`, or check the server"
        else:
            code = "no connection" if status is None else f"HTTP {status}"
            what = f"{code}: {_server_message(exc)}"
            checked = status if isinstance(status, int) else None
            hint = what_to_check(
                checked, key_env=self.settings.key_env, model=model, base_url=self.base_url
            )
        # Masked before the excerpt cuts it: a cut key is no longer the whole key.
        message = f"model {model!r} at {self.base_url} failed{after}: {excerpt(mask(what), 500)}"
        return ProviderError(mask(message), detail=mask(f"Hint: {hint}"))

    def reply(self, response: Any, retries: int) -> Reply:
        """What we keep of a completion; one without a choice or content is unreadable."""
        try:
            choice = response.choices[0]
            text = choice.message.content
            model = None if response.model is None else mask(str(response.model))
            usage = _usage(response.usage, model)
            finish = None if choice.finish_reason is None else mask(str(choice.finish_reason))
        except (AttributeError, IndexError, TypeError) as exc:
            raise self.failure(exc, _UNPARSEABLE, retries) from None
        return Reply(mask(text or ""), model, finish, usage, retries)


def mask(text: str) -> str:
    """`text` with every key of this process masked as `***`: the whole key and any run of
    SHORTEST_MASKED of its characters (a server, a proxy or a model may quote it back)."""
    for key in _keys:
        if len(key) >= 4:
            text = _mask_runs(text, key, min(SHORTEST_MASKED, len(key)))
    return text


def mask_json(value: Any) -> Any:
    """A JSON-like value with `mask` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, dict):
        return {mask_json(k): mask_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_json(v) for v in value]
    return value


def _mask_runs(text: str, key: str, shortest: int) -> str:
    merged: list[list[int]] = []
    for start, end in sorted(_key_runs(text, key, shortest)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    parts, done = [], 0
    for start, end in merged:
        parts += [text[done:start], "***"]
        done = end
    return "".join(parts) + text[done:]


def _key_runs(text: str, key: str, shortest: int) -> Iterator[tuple[int, int]]:
    """Spans of `text` that are runs of at least `shortest` characters of `key`. Every such
    run holds a whole probe (a key slice of half that length at a multiple of it), so only
    the probes are searched for, and each hit is widened along the key."""
    probe = (shortest + 1) // 2
    for offset in range(0, len(key) - probe + 1, probe):
        at = text.find(key[offset : offset + probe])
        while at >= 0:
            start, left = at, offset
            while start > 0 and left > 0 and text[start - 1] == key[left - 1]:
                start, left = start - 1, left - 1
            end, right = at + probe, offset + probe
            while end < len(text) and right < len(key) and text[end] == key[right]:
                end, right = end + 1, right + 1
            if end - start >= shortest:
                yield start, end
            at = text.find(key[offset : offset + probe], at + 1)


def _loop() -> asyncio.AbstractEventLoop:
    """This process's background event loop for sync callers (a forked child starts its own:
    the parent's thread did not come along)."""
    global _background
    with _background_lock:
        if _background is None or _background[0] != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="agenteval-judge", daemon=True)
            thread.start()
            _background = (os.getpid(), loop)
        return _background[1]


def _server_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(exc, "message", None) or exc) or type(exc).__name__


def _usage(usage: Any, model: str | None) -> Usage:
    if usage is None:
        return Usage(model=model)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cached_input_tokens=cached,
        model=model,
    )


def api_key(settings: ModelSettings) -> str | None:
    """The key in the environment variable `api_key_env` names, or None when it is unset."""
    return os.environ.get(settings.key_env) or None
