"""A provider bound to one attempt: the `ChatClient` that `task.llm()` returns.

Each call is a `model_call` event of the attempt's trace, so the runner counts its spend in
the run's ledger as it arrives, sums its usage into the attempt's record and prices it from
the manifest's `pricing:`; the agent reports nothing itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..core.chat import ChatReply, MessageLike, ToolSpec
from ..core.errors import AgentError
from ..core.llm import ProviderSpec
from ..core.trace import Trace
from .seam import Provider, ProviderUnknown, provider, route_of, run_sync
from .wire import as_message


class BoundClient:
    """A `ChatClient` of one provider for one attempt (or one grader's call)."""

    def __init__(
        self,
        provider: Provider,
        trace: Trace | None,
        model: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.provider = provider
        self.trace = trace
        self.model = model or provider.route.default_model
        self.params = dict(params or {})

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
        reply = await self.provider.send(
            asked, [as_message(m) for m in messages], tools, {**self.params, **params}
        )
        if self.trace is None:
            return reply
        event = self.trace.model_call(
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
        )
        cost = self.trace.cost_of(event)
        return reply if cost is None else replace(reply, cost=cost)

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
    providers: Mapping[str, ProviderSpec] | None, name: str | None, trace: Trace | None
) -> BoundClient:
    """`task.llm(name)`: the manifest's provider (or the implicit one) bound to the trace."""
    try:
        route = route_of(providers, name)
    except ProviderUnknown as exc:
        raise AgentError(f"task.llm: {exc.message}", detail=f"Hint: {exc.hint}") from None
    return BoundClient(provider(route), trace)
