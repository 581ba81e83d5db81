"""A provider: one API endpoint and key, through which every model call of a session goes.

A `Provider` sends a chat request in its kind's wire format (`wire.py`) over the lean HTTP
client (`http.py`), within the limits all its calls share (`gate.py`), retried as its
settings say, the key masked in whatever comes back. Providers are made once per process per
route (kind, endpoint, key variable, limits): the manifest's `providers:` by name, and an
implicit one for every settings block without `provider:` (the same `base_url` and key
variable share it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import random
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..core.chat import ChatMessage, ChatReply, ToolSpec
from ..core.errors import did_you_mean
from ..core.llm import Endpoint, ModelSettings, ProviderLimits, ProviderSpec
from ..core.text import excerpt, json_text
from . import cache as caches
from . import gate as gates
from . import http, rates
from .client import ProviderError, RequestTimeout, mask, register_key
from .retry import DEFAULT_BACKOFF, DEFAULT_RETRIES, RetryPolicy, retryable, what_to_check
from .wire import WIRES, WireError

DEFAULT_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
DEFAULT_KEYS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_TIMEOUT = 600.0
T = TypeVar("T")
_providers: dict[Route, Provider] = {}
_lock = threading.Lock()
_background: tuple[int, asyncio.AbstractEventLoop] | None = None


class ProviderUnknown(Exception):
    """A `provider:` name the manifest does not define (a spec error, with its hint)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


@dataclass(frozen=True, slots=True)
class Route:
    """What makes two calls share a provider: kind, endpoint, key variable and limits."""

    name: str
    """The manifest's name, or `KIND` for an implicit provider."""
    kind: str
    base_url: str
    key_env: str
    limits: ProviderLimits = field(default_factory=ProviderLimits)
    timeout: float = DEFAULT_TIMEOUT
    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF
    default_model: str | None = None

    @property
    def label(self) -> str:
        """How limit files and reports name the provider (one per endpoint and key)."""
        return f"{self.name}@{self.base_url}#{self.key_env}"


def route_of(
    providers: Mapping[str, ProviderSpec] | None,
    name: str | None = None,
    settings: ModelSettings | None = None,
) -> Route:
    """The route a call takes: the named provider, else the settings' endpoint (an implicit
    OpenAI-kind provider). `task.llm()` with no name and no settings takes the manifest's only
    provider when it has one. Raises ProviderUnknown for a name not in `providers:`."""
    name = name or (settings.provider if settings else None)
    table = providers or {}
    if name is None and settings is None and len(table) == 1:
        name = next(iter(table))
    if name is not None:
        spec = table.get(name)
        if spec is None:
            hint = did_you_mean(name, table) or (
                "providers: " + ", ".join(sorted(table)) if table else "add it under `providers:`"
            )
            raise ProviderUnknown(f"no provider {name!r} in the manifest's providers:", hint)
        return _spec_route(name, spec, settings)
    s = settings or ModelSettings()
    base = s.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_URLS["openai"]
    return _implicit_route(base, s.key_env, s.timeout, s.retries, s.backoff)


def _spec_route(name: str, spec: ProviderSpec, settings: ModelSettings | None) -> Route:
    kind, endpoint = spec.kind, spec.endpoint
    timeout = spec.timeout or (settings.timeout if settings else None)
    retries = spec.retries if spec.retries is not None else (settings.retries if settings else None)
    backoff = spec.backoff if spec.backoff is not None else (settings.backoff if settings else None)
    return Route(
        name,
        kind,
        endpoint.base_url or DEFAULT_URLS[kind],
        endpoint.api_key_env or DEFAULT_KEYS[kind],
        spec.limits,
        timeout or DEFAULT_TIMEOUT,
        DEFAULT_RETRIES if retries is None else retries,
        DEFAULT_BACKOFF if backoff is None else backoff,
        endpoint.model,
    )


@functools.lru_cache(maxsize=256)  # asked for at every call: a pure function of its values
def _implicit_route(
    base: str, key_env: str, timeout: float | None, retries: int | None, backoff: float | None
) -> Route:
    return Route(
        "openai",
        "openai",
        base,
        key_env,
        timeout=timeout or DEFAULT_TIMEOUT,
        retries=DEFAULT_RETRIES if retries is None else retries,
        backoff=DEFAULT_BACKOFF if backoff is None else backoff,
    )


def provider(route: Route) -> Provider:
    """The process's provider of this route (made once; its key read then)."""
    with _lock:
        found = _providers.get(route)
        if found is None:
            found = _providers[route] = Provider(route)
        return found


def forget() -> None:
    """The session is over: its providers and their connections are not a later session's."""
    with _lock:
        _providers.clear()
    _implicit_route.cache_clear()
    http.forget()
    gates.use_gate(None)
    caches.use_cache(None)
    rates.use_rates(None)


@dataclass
class Provider:
    """One route's calls: request, limits, retries, masking."""

    route: Route
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.wire = WIRES[self.route.kind]
        self.policy = RetryPolicy(self.route.retries, self.route.backoff)
        self.rate_limited = 0
        """429 answers seen by this process."""

    @property
    def name(self) -> str:
        return self.route.name

    def key(self) -> str:
        """The API key, read from its variable at each call (a test may set it late)."""
        key = os.environ.get(self.route.key_env)
        if not key:
            raise ProviderError(
                f"provider {self.name!r}: the environment variable {self.route.key_env} "
                "(api_key_env) holding the API key is not set",
                detail=f"Hint: export {self.route.key_env}=...; a local server takes any value",
            )
        register_key(key)
        return key

    def prepare(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        params: Mapping[str, Any] | None = None,
    ) -> Prepared:
        """The request as it will be sent (its size bounds its input tokens)."""
        body = self.wire.body(model, messages, tools, params or {})
        data = json_text(body).encode()
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        return Prepared(model, data, max_tokens if isinstance(max_tokens, int) else None)

    async def send(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        params: Mapping[str, Any] | None = None,
    ) -> ChatReply:
        """One chat call, retried as the policy says; its reply carries latency and retries."""
        return await self.exchange(self.prepare(model, messages, tools, params))

    async def exchange(self, request: Prepared, deadline: float | None = None) -> ChatReply:
        """Send a prepared request, retried as the policy says, but never waited for nor sent
        again at or past `deadline` (`time.monotonic()`: the attempt's timeout)."""
        model, body = request.model, request.body
        headers = self.wire.headers(self.key())
        url = self.wire.url(self.route.base_url)
        retries, t0 = 0, time.perf_counter()
        reserved = len(body) + (request.max_tokens or 0)  # bytes bound the input tokens
        per_minute = rates.current()
        while True:
            await per_minute.admit(self.route, reserved)  # requests_per_minute, tokens_per_minute
            used = 0
            try:
                response = await self._admitted(url, headers, body)
                reply = self._reply(model, response, retries, time.perf_counter() - t0)
                used = (reply.input_tokens or 0) + (reply.output_tokens or 0) or reserved
                return reply
            except ProviderError:
                raise
            except Exception as exc:
                status, after = _classify(exc)
                again = not isinstance(status, str) and retryable(status)
                if not (again and retries < self.policy.retries):
                    raise self._failure(model, exc, status, retries) from None
                wait = self.policy.delay(retries, after, self.rng)
                if deadline is not None and time.monotonic() + wait >= deadline:
                    raise self._failure(model, exc, status, retries) from None
            finally:
                per_minute.settle(self.route, reserved, used)
            await asyncio.sleep(wait)
            retries += 1

    async def _admitted(self, url: str, headers: dict[str, str], body: bytes) -> http.Response:
        """One request within the provider's limits, which learn from how it went (a provider
        without `max_in_flight` has none to hold)."""
        gate = gates.current() if self.route.limits.max_in_flight is not None else None
        held = gate.hold(self.route, len(body)) if gate is not None else _UNLIMITED
        async with held as slot:
            try:
                response = await self._post(url, headers, body)
            except StatusError as exc:
                if exc.response.status == 429:
                    self.rate_limited += 1
                    if gate is not None:
                        gate.rate_limited(self.route, slot)
                raise
            if gate is not None:
                gate.succeeded(self.route, response.headers, slot)
            return response

    async def _post(self, url: str, headers: dict[str, str], body: bytes) -> http.Response:
        try:
            async with asyncio.timeout(self.route.timeout):
                response = await http.pool().request("POST", url, headers, body)
        except TimeoutError:
            raise RequestTimeout(self.route.timeout) from None
        if response.status >= 300:
            raise StatusError(response)
        return response

    def _reply(self, model: str, response: http.Response, retries: int, took: float) -> ChatReply:
        try:
            reply = self.wire.reply(
                json.loads(response.body), latency=took, retries=retries, provider=self.name
            )
        except (ValueError, WireError) as exc:
            raise self._failure(model, exc, "unparseable", retries) from None
        text = mask(reply.text)
        answered = None if reply.model is None else mask(reply.model)
        if text is not reply.text or answered is not reply.model:  # a key quoted back
            reply = replace(reply, text=text, model=answered)
        return reply

    def _failure(
        self, model: str, exc: Exception, status: int | str | None, retries: int
    ) -> ProviderError:
        base = self.route.base_url
        after = f" (after {retries} retries)" if retries else ""
        if status == "unparseable":
            reply, api = _REPLIES.get(self.wire.kind, ("a reply", "the right kind of"))
            what = f"the reply is not {reply}: {exc}"
            hint = f"is {base} {api} API?"
        elif isinstance(exc, RequestTimeout):
            what = str(exc)
            hint = "the server answers too slowly: raise `timeout`, or check the server"
        else:
            code = "no connection" if status is None else f"HTTP {status}"
            what = f"{code}: {_server_message(exc)}"
            checked = status if isinstance(status, int) else None
            hint = what_to_check(checked, key_env=self.route.key_env, model=model, base_url=base)
        message = f"model {model!r} at {base} failed{after}: {excerpt(mask(what), 500)}"
        error = ProviderError(mask(message), detail=mask(f"Hint: {hint}"))
        error.status = status if isinstance(status, int) else None
        error.billed = status == "unparseable" or isinstance(exc, RequestTimeout | http.Unanswered)
        if status == 429:
            error.error_class = "rate_limited"
        elif isinstance(exc, RequestTimeout):
            error.error_class = "timeout"
        return error


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready to send: its model, its body, the `max_tokens` (or
    `max_completion_tokens`) it asks for."""

    model: str
    body: bytes
    max_tokens: int | None


class StatusError(Exception):
    """A reply whose status is not a success."""

    def __init__(self, response: http.Response) -> None:
        super().__init__(f"HTTP {response.status}")
        self.response = response


def _classify(exc: Exception) -> tuple[int | str | None, str | None]:
    if isinstance(exc, StatusError):
        return exc.response.status, exc.response.headers.get("retry-after")
    if isinstance(exc, http.HttpError | RequestTimeout | OSError):
        return None, None
    return "unparseable", None


_UNLIMITED: contextlib.nullcontext[None] = contextlib.nullcontext()
"""What a provider without `max_in_flight` holds around a request: nothing."""
_REPLIES = {
    "openai": ("a chat completion", "an OpenAI-compatible (…/v1)"),
    "anthropic": ("a Messages API reply", "an Anthropic Messages"),
}
"""What each wire kind's reply is called, and its API, in an unreadable reply's message."""


def _server_message(exc: Exception) -> str:
    if not isinstance(exc, StatusError):
        return str(exc) or type(exc).__name__
    body = exc.response.body.decode("utf-8", "replace")
    try:
        data = json.loads(body)
    except ValueError:
        return body or str(exc)
    inner = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])
    return body


def run_sync(call: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine for a sync caller on this process's background loop, where a deadline
    can cancel it (a caller interrupted cancels it too)."""
    loop = _loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        call.close()
        raise RuntimeError("chat() called on the provider loop: use `await achat(...)`")
    future = asyncio.run_coroutine_threadsafe(call, loop)
    try:
        return future.result()
    finally:
        future.cancel()


def _loop() -> asyncio.AbstractEventLoop:
    global _background
    with _lock:
        if _background is None or _background[0] != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agenteval-provider", daemon=True
            )
            thread.start()
            _background = (os.getpid(), loop)
        return _background[1]


__all__ = ["Endpoint", "Provider", "ProviderUnknown", "Route", "provider", "route_of", "run_sync"]
