"""Chat completions through the official `openai` SDK (an optional extra), with our retries.

The SDK is imported only when a dataset uses a provider. One `Connection` per agent spec or
judge setting holds the client (async for agents, so many calls share the executor's loop;
sync for judges, which grade on pytest's thread). The API key is read from the environment
once and never leaves this module: every message built from a failure has it masked.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import random
import time
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


class ProviderError(AgentError):
    """A provider call that failed for good: refused, out of retries, or an unreadable reply.
    Infrastructure trouble, so the attempt is an *error*, never a failure."""

    error_type = "ProviderError"


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
    is_async: bool
    client: Any = field(init=False)
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.client = self._make_client()
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop the async client's connections belong to."""
        self.policy = RetryPolicy(
            DEFAULT_RETRIES if self.settings.retries is None else self.settings.retries,
            DEFAULT_BACKOFF if self.settings.backoff is None else self.settings.backoff,
        )

    def _make_client(self) -> Any:
        make = self.sdk.AsyncOpenAI if self.is_async else self.sdk.OpenAI
        timeout = self.settings.timeout
        return make(
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
                client = self._async_client()
                request = self.request(messages, max_tokens)
                response = await client.chat.completions.create(**request)
                return self.reply(response, retries)
            except Exception as exc:
                wait = self._next(exc, retries)
            await asyncio.sleep(wait)
            retries += 1

    def complete(self, messages: list[dict[str, Any]]) -> Reply:
        """One completion, retried as the policy says (a sync client's)."""
        retries = 0
        while True:
            try:
                response = self.client.chat.completions.create(**self.request(messages))
                return self.reply(response, retries)
            except Exception as exc:
                wait = self._next(exc, retries)
            time.sleep(wait)
            retries += 1

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
        if isinstance(exc, self.sdk.APIConnectionError):
            return None, None
        return _UNPARSEABLE, None

    def failure(self, exc: Exception, status: int | str | None, retries: int) -> ProviderError:
        """The error a failed call ends with: what happened, and what to check."""
        model = str(self.settings.model)
        after = f" (after {retries} retries)" if retries else ""
        if status == _UNPARSEABLE:
            what = f"the reply is not a chat completion: {type(exc).__name__}: {exc}"
            hint = f"is {self.base_url} an OpenAI-compatible API (…/v1)?"
        else:
            code = "no connection" if status is None else f"HTTP {status}"
            what = f"{code}: {_server_message(exc)}"
            checked = status if isinstance(status, int) else None
            hint = what_to_check(
                checked, key_env=self.settings.key_env, model=model, base_url=self.base_url
            )
        message = f"model {model!r} at {self.base_url} failed{after}: {excerpt(what, 500)}"
        return ProviderError(self.redact(message), detail=self.redact(f"Hint: {hint}"))

    def reply(self, response: Any, retries: int) -> Reply:
        """What we keep of a completion; one without a choice or content is unreadable."""
        try:
            choice = response.choices[0]
            text = choice.message.content
            usage = _usage(response.usage, response.model)
        except (AttributeError, IndexError, TypeError) as exc:
            raise self.failure(exc, _UNPARSEABLE, retries) from None
        return Reply(text or "", response.model, choice.finish_reason, usage, retries)

    def redact(self, text: str) -> str:
        """`text` with the API key masked (a server may quote it back in an error)."""
        return text.replace(self.key, "***") if len(self.key) >= 4 else text


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
