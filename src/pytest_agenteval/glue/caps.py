"""Before spending: which model calls a spend or token cap cannot bound, said once.

A call reserves its worst case before it is sent: its bytes and its `max_tokens` (or
`max_completion_tokens`) at its model's price. A call that sends no output limit, or whose
model has no price in the manifest's `pricing:`, reserves less than it may cost, so the cap
is approximate for it. The session's start names the agents and judges whose calls are such
(an Anthropic-kind endpoint always sends `max_tokens`; calls an agent's code makes through
`task.llm()` cannot be known up front).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import ValidationError

from ..core.llm import ModelPrice, ModelSettings, ProviderSpec
from ..core.model import AnyAgentSpec, PluginAgentSpec
from ..providers.pricing import price_of
from ..providers.seam import ProviderUnknown, route_of
from ..sources.dataset import Dataset, with_judge_defaults
from ..sources.speccache import CachedTask

SHOWN = 6
"""Calls named in the warning; the rest are counted."""


def approximate_line(
    datasets: list[Dataset], variants: tuple[str, ...], max_cost: float | None, capped: bool
) -> str | None:
    """The warning naming the calls the run's caps bound only approximately, or None."""
    if not capped:
        return None
    found: dict[str, None] = {}
    for dataset in datasets:
        pricing = dataset.manifest.pricing or {}
        known: dict[str, str] = {}  # a suite's judges mostly share their options: judged once
        for who, options in _calls(dataset, variants):
            key = json.dumps(options, sort_keys=True, default=str)
            if key not in known:
                cost = max_cost is not None
                known[key] = _why(options, dataset.manifest.providers, pricing, cost)
            if known[key]:
                found[f"{who} ({known[key]})"] = None
    if not found:
        return None
    named = list(found)
    more = f"; and {len(named) - SHOWN} more" if len(named) > SHOWN else ""
    return (
        "agenteval: WARNING: the run's cap is approximate for these calls (their worst case is "
        f"not known before they are sent): {'; '.join(named[:SHOWN])}{more}. Hint: set "
        "`max_tokens` on them and give their models a price in the manifest's `pricing:`"
    )


def _why(
    options: Mapping[str, Any],
    providers: Mapping[str, ProviderSpec] | None,
    pricing: Mapping[str, ModelPrice],
    cost: bool,
) -> str:
    """What makes a call's worst case unknown: no output limit, no price ("" for neither)."""
    known = {k: v for k, v in options.items() if k in ModelSettings.model_fields}
    try:
        settings = ModelSettings.model_validate(known)
        route = route_of(providers, settings=settings)
    except (ValidationError, ProviderUnknown):
        return ""  # its own error says what is wrong, where it is built
    params = settings.params or {}
    limited = (
        settings.max_tokens is not None
        or "max_tokens" in params
        or "max_completion_tokens" in params
        or route.kind == "anthropic"
    )
    model = settings.model or route.default_model
    reasons = [] if limited else ["sends no max_tokens"]
    if cost and model and price_of(model, pricing) is None:
        reasons.append(f"model {model!r} has no price")
    return ", ".join(reasons)


def _calls(dataset: Dataset, variants: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each agent and judge of `dataset` that calls a model, with its options."""
    manifest = dataset.manifest
    at = f"[{dataset.name}]"

    def agent(spec: AnyAgentSpec, who: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(spec, PluginAgentSpec) and spec.type in ("openai", "react"):
            yield who, dict(spec.options)

    for name, variant in (manifest.variants or {}).items():
        if not variants or name in variants:
            yield from agent(variant.agent, f"agent of variant {name} {at}")
    if manifest.agent is not None and not manifest.variants:
        yield from agent(manifest.agent, f"agent {at}")
    for path in dataset.task_files():
        for task in dataset.read(path).tasks:
            if not isinstance(task, CachedTask):
                continue
            if task.spec.agent is not None:
                yield from agent(task.spec.agent, f"agent of {task.spec.id} {at}")
            graders = task.spec.graders or manifest.defaults.graders or []
            for grader in with_judge_defaults(list(graders), manifest):
                if grader.type == "judge":
                    yield f"judges {at}", dict(grader.options)
