"""A provider bound to one attempt: the `ChatClient` that `task.llm()` returns.

Each call is a `model_call` event of the attempt's trace, so the runner counts its spend in
the run's ledger as it arrives, sums its usage into the attempt's record and prices it from
the manifest's `pricing:`; the agent reports nothing itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..core.chat import ChatReply, MessageLike, ToolSpec
from ..core.errors import AgentError, RunStopped
from ..core.llm import ModelPrice, ModelSettings, ProviderSpec
from ..core.model import Usage
from ..core.trace import Trace
from . import cache as caches
from .client import ProviderError
from .pricing import cost, price_of
from .seam import Prepared, Provider, ProviderUnknown, provider, route_of, run_sync
from .wire import as_message


class Spend(Protocol):
    """The run's ledger and caps as a call sees them (the run's `Stops`)."""

    async def reserve(self, cost: float | None, tokens: int | None) -> str | None:
        """Hold the call's worst case (waiting for room under a cap); why the run stops, or
        None when it is held."""
        ...

    def settle(self, reserved: tuple[float, int], actual: tuple[float, int] | None) -> None:
        """The call ended: `actual` is what it cost (None: neither answered nor billed)."""
        ...


class BoundClient:
    """A `ChatClient` of one provider for one attempt (or one grader's call)."""

    def __init__(
        self,
        provider: Provider,
        trace: Trace | None,
        model: str | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        spend: Spend | None = None,
        pricing: Mapping[str, ModelPrice] | None = None,
        attempt: int | None = None,
        task_id: str | None = None,
        variant: str | None = None,
    ) -> None:
        self.provider = provider
        self.attempt = attempt
        """The attempt's index: part of a cache key, so attempt k stays its own sample."""
        self.task_id = task_id
        self.variant = variant
        """The attempt's variant: part of a cache key, so two variants sending the same
        request each pay for their own answer (None: a dataset without variants)."""
        self.trace = trace
        self.model = model or provider.route.default_model
        self.params = dict(params or {})
        self.spend = spend
        """The run's caps: each call reserves its worst case first (None: no cap)."""
        self.pricing = pricing

    def worst(self, request: Prepared) -> tuple[float | None, int | None]:
        """A call's worst case: its body's bytes bound its input tokens, `max_tokens` (or
        `max_completion_tokens`) its output, at the asked model's prices (None where either
        is unknown)."""
        if request.max_tokens is None:
            return None, None
        tokens = len(request.body) + request.max_tokens
        price = price_of(request.model, self.pricing or {})
        if price is None:
            return None, tokens
        return cost(price, len(request.body), request.max_tokens), tokens

    async def achat(
        self,
        messages: Sequence[MessageLike],
        *,
        model: str | None = None,
        tools: Sequence[ToolSpec] = (),
        **params: Any,
    ) -> ChatReply:
        """One call: the reply with its text, tool calls, usage and cost."""
        asked = model or self.model
        if not asked:
            raise AgentError(
                f"provider {self.provider.name!r}: no model named",
                detail="Hint: pass model=... or set `model:` on the provider's endpoint",
            )
        started = time.time()
        request = self.provider.prepare(
            asked, [as_message(m) for m in messages], tools, {**self.params, **params}
        )
        cache, key = caches.current(), ""
        if cache is not None:
            route = self.provider.route
            key = cache.key(route.kind, route.base_url, request.body, self.attempt, self.variant)
            hit = cache.get(key)
            if hit is not None:
                return self._cached(asked, *hit, started)
            if cache.mode == "replay":
                raise self._replay_miss(asked)
        reply = await self.exchange(request, started, missed=cache is not None)
        if cache is not None and cache.writes:
            cache.put(key, reply, reply.cost)
        return reply

    async def exchange(
        self, request: Prepared, started: float | None = None, *, missed: bool = False
    ) -> ChatReply:
        """Send `request` past no cache: its worst case reserved against the run's caps
        first, then settled to what it cost; the reply priced and in the trace (`missed`:
        the model cache was asked first and had no answer)."""
        started = time.time() if started is None else started
        deadline = self.trace.deadline if self.trace is not None else None
        if self.trace is not None and deadline is not None and time.monotonic() >= deadline:
            self.trace.check()  # the attempt's timeout passed: LimitReached, nothing is sent
        reserved = await self._reserve(request)
        actual = reserved  # cancelled after it was sent, or failed after: the server may bill it
        try:
            reply = await self.provider.exchange(request, deadline)
            if missed:
                reply = replace(reply, cache_missed=True)
            priced = self._record(request.model, reply, started)
            actual = self._actual(reply, priced, reserved)
        except ProviderError as exc:  # refused or never sent: given back; else counted
            actual = reserved if exc.billed else None
            raise
        finally:
            self._settle(reserved, actual)
        return reply if priced is None else replace(reply, cost=priced)

    def _record(self, asked: str, reply: ChatReply, started: float) -> float | None:
        """The call's `model_call` event (an attempt's call), and its cost."""
        if self.trace is None:  # a grader's call: priced here
            return reply.cost if reply.cost is not None else self._price(asked, reply)
        event = self.trace.model_call(
            counted=self.spend is not None,
            provider=reply.provider,
            request_model=asked,
            model=reply.model,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            cached_input_tokens=reply.cached_input_tokens,
            cost=reply.cost,
            latency=reply.latency,
            finish_reason=reply.finish_reason,
            started_at=started,
            retries=reply.retries,
            cached=reply.cached,
            cached_cost=reply.cached_cost,
            cache_missed=reply.cache_missed or None,
        )
        return self.trace.cost_of(event)

    def _cached(
        self, asked: str, reply: ChatReply, original: float | None, started: float
    ) -> ChatReply:
        """A cache hit: $0 against every cap, its first cost kept apart as `cached_cost`."""
        reply = replace(
            reply,
            cost=0.0,
            cached=True,
            cached_cost=original,
            cache_missed=False,
            provider=self.provider.name,
        )
        self._record(asked, reply, started)
        return reply

    def _replay_miss(self, asked: str) -> ProviderError:
        task = f"task {self.task_id!r} attempt {self.attempt}" if self.task_id else "a call"
        return ProviderError(
            f"model cache (replay): no cached answer for {task}, model {asked!r} at "
            f"{self.provider.route.base_url}",
            detail="Hint: fill the cache with a run under --agenteval-model-cache on; a "
            "request that changed (messages, tools, parameters, model) or another attempt "
            "index is a miss",
        )

    def _price(self, asked: str, reply: ChatReply) -> float | None:
        """A grader's call priced: the model that answered, else the one asked for."""
        pricing = self.pricing or {}
        price = (price_of(reply.model, pricing) if reply.model else None) or price_of(
            asked, pricing
        )
        if price is None or (reply.input_tokens is None and reply.output_tokens is None):
            return None
        return cost(
            price, reply.input_tokens or 0, reply.output_tokens or 0, reply.cached_input_tokens or 0
        )

    async def _reserve(self, request: Prepared) -> tuple[float, int] | None:
        if self.spend is None:
            return None
        worst_cost, worst_tokens = self.worst(request)
        reason = await self.spend.reserve(worst_cost, worst_tokens)
        if reason is not None:
            if self.trace is not None:  # the runner reads a run stop from the trace
                self.trace.limit_hit("run", reason)
            raise RunStopped(reason)
        return worst_cost or 0.0, worst_tokens or 0

    def _settle(self, reserved: tuple[float, int] | None, actual: tuple[float, int] | None) -> None:
        if self.spend is not None and reserved is not None:
            self.spend.settle(reserved, actual)

    @staticmethod
    def _actual(
        reply: ChatReply, priced: float | None, reserved: tuple[float, int] | None
    ) -> tuple[float, int]:
        """What an answered call cost the run: its usage priced; what a reply does not say
        (no usage or half of it, no price) is counted at the call's reservation, never as
        nothing."""
        worst_cost, worst_tokens = reserved or (0.0, 0)
        cost = worst_cost if priced is None else priced
        if reply.input_tokens is None or reply.output_tokens is None:
            return max(cost, worst_cost), max(worst_tokens, reply.input_tokens or 0)
        return cost, reply.input_tokens + reply.output_tokens

    def chat(
        self,
        messages: Sequence[MessageLike],
        *,
        model: str | None = None,
        tools: Sequence[ToolSpec] = (),
        **params: Any,
    ) -> ChatReply:
        """`achat` for a sync caller (run on the providers' background loop)."""
        return run_sync(self.achat(messages, model=model, tools=tools, **params))


def attempt_llm(
    providers: Mapping[str, ProviderSpec] | None,
    name: str | None,
    trace: Trace | None,
    *,
    spend: Spend | None = None,
    pricing: Mapping[str, ModelPrice] | None = None,
    settings: ModelSettings | None = None,
    attempt: int | None = None,
    task_id: str | None = None,
    variant: str | None = None,
) -> BoundClient:
    """`task.llm(name)`: the manifest's provider (or the implicit one) bound to the trace
    and the run's caps."""
    try:
        route = route_of(providers, name, settings)
    except ProviderUnknown as exc:
        raise AgentError(f"task.llm: {exc.message}", detail=f"Hint: {exc.hint}") from None
    return BoundClient(
        provider(route),
        trace,
        spend=spend,
        pricing=pricing,
        attempt=attempt,
        task_id=task_id,
        variant=variant,
    )


def usage_of(reply: ChatReply) -> Usage:
    """What a reply used, as an attempt's or a judge's record keeps it."""
    return Usage(
        input_tokens=reply.input_tokens,
        output_tokens=reply.output_tokens,
        cached_input_tokens=reply.cached_input_tokens,
        cost=reply.cost,
        model=reply.model,
        cached_calls=1 if reply.cached else None,
        cached_cost=reply.cached_cost if reply.cached else None,
        cache_misses=1 if reply.cache_missed else None,
    )
