"""The probe before spending: each provider and model a session will call, checked once.

Before the first attempt's agent is called, every route (endpoint and key) is asked for its
models list (`GET …/models`, which both the OpenAI and the Anthropic API have; a model the
list does not name is asked for by `GET …/models/NAME`, as a list may be paged); an endpoint
without a models list gets the smallest request instead (one token of one model). Under a
cost cap, every agent and judge model must have a price. What fails is a `ProbeProblem`
naming the provider, the model, who uses it and what to fix, so a typo'd model or an
expired key stops the session before anything is spent, not attempt by attempt.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

from ..core.chat import ChatMessage
from ..core.errors import RunStopped
from ..core.llm import ModelPrice
from . import http
from .bound import BoundClient, Spend
from .client import ProviderError, mask
from .pricing import price_of
from .seam import Route, provider
from .wire import WIRES

PROBE_TIMEOUT = 30.0
"""Seconds one probe request may take."""


Role = Literal["agent", "judge", "llm"]


@dataclass(frozen=True, slots=True)
class Use:
    """One model a session reaches through one route, and who calls it."""

    route: Route
    model: str | None
    """None: the route is reached but no model is known up front (`task.llm()`)."""
    who: str
    """Who calls it, for messages: `agent`, `agent of variant v2`, `judge of t1`..."""
    role: Role = "agent"
    """An agent's or a judge's model needs a price under a cost cap; `task.llm()`'s is
    asked for by the agent's code, which the probe cannot read."""


@dataclass(frozen=True, slots=True)
class ProbeProblem:
    """Why the session cannot start: what failed and what to fix."""

    provider: str
    model: str | None
    what: str
    fix: str

    def line(self) -> str:
        model = f" model {self.model!r}" if self.model else ""
        return f"provider {self.provider!r}{model}: {self.what}. Fix: {self.fix}"


def unpriced(
    uses: Iterable[Use], pricing: Mapping[str, ModelPrice], capped: bool
) -> list[ProbeProblem]:
    """Under a cost cap, the agent and judge models without a price (each once)."""
    if not capped:
        return []
    seen: dict[str, ProbeProblem] = {}
    for use in uses:
        model = use.model
        if use.role != "llm" and model and model not in seen and not price_of(model, pricing):
            seen[model] = ProbeProblem(
                use.route.name,
                model,
                f"has no price ({use.who}) and --agenteval-max-cost caps the run",
                f"add `pricing: {{{model}: {{input_per_mtok: ..., output_per_mtok: ...}}}}` "
                "to the manifest, or run without --agenteval-max-cost",
            )
    return list(seen.values())


async def probe(
    uses: Sequence[Use],
    spend: Spend | None = None,
    pricing: Mapping[str, ModelPrice] | None = None,
) -> list[ProbeProblem]:
    """Check every route and model of `uses` once, the routes concurrently. A request that
    costs (the one-token fallback) is reserved against `spend`, the run's caps, and priced
    from `pricing` into the run's spend, as any model call is."""
    routes: dict[tuple[str, str, str], tuple[Route, dict[str, str]]] = {}
    for use in uses:  # one check per endpoint and key, whatever the limits or timeouts
        r = use.route
        _, models = routes.setdefault((r.kind, r.base_url, r.key_env), (r, {}))
        if use.model:
            models.setdefault(use.model, use.who)
    clients = (
        (BoundClient(provider(r), None, spend=spend, pricing=pricing), m)
        for r, m in routes.values()
    )
    found = await asyncio.gather(*(_route(client, m) for client, m in clients))
    return [p for problems in found for p in problems]


async def _route(client: BoundClient, models: Mapping[str, str]) -> list[ProbeProblem]:
    target = client.provider
    route = target.route
    try:
        headers = target.wire.headers(target.key())
    except ProviderError as exc:  # its words without what the problem's line says already
        what = exc.message.removeprefix(f"provider {route.name!r}: ")
        fix = (exc.detail or "set the key").removeprefix("Hint: ")
        return [ProbeProblem(route.name, None, what, fix)]
    url = WIRES[route.kind].models_url(route.base_url)
    listed = await _get(url, headers)
    if isinstance(listed, _Refused):
        return [listed.at(route)]
    if listed is None:  # no models list: the smallest request per model tells instead
        return [p for m in models if (p := await _smallest(client, m)) is not None]
    problems = []
    for model, who in models.items():
        if model not in listed:
            one = await _get(f"{url}/{quote(model, safe='')}", headers)
            if isinstance(one, _Refused):
                problems.append(one.at(route, model, who))
            elif one is None and (smallest := await _smallest(client, model)) is not None:
                problems.append(smallest)
    return problems


@dataclass(frozen=True, slots=True)
class _Refused:
    """A probe request's failure, before it knows its route and model."""

    status: int | None
    message: str

    def at(self, route: Route, model: str | None = None, who: str = "") -> ProbeProblem:
        code = "no connection" if self.status is None else f"HTTP {self.status}"
        whose = f" ({who})" if who else ""
        what = f"{code} from {route.base_url}{whose}: {self.message}"
        return ProbeProblem(route.name, model, mask(what), _fix(self.status, route, model))


def _fix(status: int | None, route: Route, model: str | None) -> str:
    if status in (401, 403):
        return f"check the API key in the environment variable {route.key_env} (api_key_env)"
    if status == 404 and model:
        return f"check the model name {model!r} (the provider does not know it)"
    if status is None:
        return f"check base_url {route.base_url} and that the server is up"
    return "check the provider's base_url, key and model, or skip with --agenteval-no-probe"


_Answer = set[str] | None | _Refused


async def _get(url: str, headers: dict[str, str]) -> _Answer:
    """The model ids a models endpoint lists (a model's own endpoint: its one id); None when
    the endpoint has no such list; a `_Refused` for a key refused or a model unknown."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            response = await http.pool().request("GET", url, headers, None)
    except (http.HttpError, OSError, TimeoutError) as exc:
        return _Refused(None, str(exc) or type(exc).__name__)
    if response.status in (401, 403) or (response.status == 404 and _is_model(url)):
        return _Refused(response.status, _message(response.body))
    if response.status != 200:
        return None
    try:
        data = json.loads(response.body)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return {str(m.get("id")) for m in data["data"] if isinstance(m, dict)}
    if isinstance(data, dict) and "id" in data:
        return {str(data["id"])}
    return None


def _is_model(url: str) -> bool:
    return not url.rstrip("/").endswith("/models")


async def _smallest(client: BoundClient, model: str) -> ProbeProblem | None:
    """One token of `model`: the probe of an endpoint that lists no models (past the model
    cache: a cached answer would tell nothing of the endpoint now)."""
    target = client.provider
    try:
        request = target.prepare(model, [ChatMessage("user", "ping")], (), {"max_tokens": 1})
        await client.exchange(request)
    except RunStopped as stop:
        fix = (
            "raise --agenteval-max-cost / --agenteval-max-tokens, or skip with --agenteval-no-probe"
        )
        return ProbeProblem(
            target.name, model, f"the run's cap has no room for the probe: {stop}", fix
        )
    except ProviderError as exc:
        status = getattr(exc, "status", None)
        what = exc.message
        return ProbeProblem(target.name, model, what, _fix(status, target.route, model))
    return None


def _message(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200] or "no reason given"
    inner = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(inner, dict) and inner.get("message"):
        return str(inner["message"])[:200]
    return text[:200]
