"""Prices tokens with the manifest's `pricing:` table (US dollars per million tokens).

A model is looked up by the name the provider reported; when that name is not in the table,
the longest table name it starts with followed by `-` counts (`gpt-4o` prices the snapshot
`gpt-4o-2024-08-06`). Reported costs are never replaced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..core.llm import ModelPrice
from ..core.model import Verdict
from ..core.records import AttemptRecord

MILLION = 1_000_000


def price_of(model: str | None, table: Mapping[str, ModelPrice]) -> ModelPrice | None:
    """The table's price of `model`, by exact name or the longest `name-` prefix."""
    if model is None:
        return None
    found = table.get(model)
    if found is not None:
        return found
    prefixes = [name for name in table if model.startswith(name + "-")]
    return table[max(prefixes, key=len)] if prefixes else None


def cost(price: ModelPrice, input_tokens: int, output_tokens: int, cached: int = 0) -> float:
    """Dollars for these tokens; cached input tokens are part of `input_tokens`."""
    cached = min(cached, input_tokens)
    cached_price = (
        price.input_per_mtok
        if price.cached_input_per_mtok is None
        else (price.cached_input_per_mtok)
    )
    return (
        (input_tokens - cached) * price.input_per_mtok
        + cached * cached_price
        + output_tokens * price.output_per_mtok
    ) / MILLION


def priced(usage: dict[str, Any], table: Mapping[str, ModelPrice]) -> dict[str, Any]:
    """`usage` (stored form) with its cost filled in from the table, when it had none and
    its model has a price; else `usage` itself."""
    if usage.get("cost") is not None:
        return usage
    tokens = usage.get("input_tokens"), usage.get("output_tokens")
    price = price_of(usage.get("model"), table)
    if price is None or tokens == (None, None):
        return usage
    spent = cost(price, tokens[0] or 0, tokens[1] or 0, usage.get("cached_input_tokens") or 0)
    return {**usage, "cost": spent}


def with_prices(record: AttemptRecord, table: Mapping[str, ModelPrice]) -> AttemptRecord:
    """The record with the agent's and the judges' costs filled in where the table knows
    their model and they reported none."""
    usage = priced(record.usage, table) if record.usage else record.usage
    verdicts = tuple(_priced_verdict(v, table) for v in record.verdicts)
    if usage is record.usage and all(
        a is b for a, b in zip(verdicts, record.verdicts, strict=True)
    ):
        return record
    return replace(record, usage=usage, verdicts=verdicts)


def _priced_verdict(verdict: Verdict, table: Mapping[str, ModelPrice]) -> Verdict:
    usage = verdict.details.get("usage") if verdict.details else None
    if not isinstance(usage, dict):
        return verdict
    found = priced(usage, table)
    if found is usage:
        return verdict
    return replace(verdict, details={**(verdict.details or {}), "usage": found})
