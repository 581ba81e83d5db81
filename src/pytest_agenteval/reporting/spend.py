"""What a run cost: the agent's and the judges' spend, and how much of it had a known price."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.records import spend_sum
from ..store.index import IndexRow

if TYPE_CHECKING:
    from .summary import Summary

NO_MODEL = "(no model named)"


def spend_totals(rows: Sequence[IndexRow]) -> dict[str, float | None]:
    """`cost` (everything: what spend caps count), `agent_cost` and `judge_cost`."""
    return {
        "cost": spend_sum(r.spend for r in rows),
        "agent_cost": spend_sum(r.cost for r in rows),
        "judge_cost": spend_sum(r.judge_cost for r in rows),
    }


def cache_totals(rows: Sequence[IndexRow]) -> dict[str, Any] | None:
    """summary.json's `model_cache`: hits, misses and the first cost of the cached answers;
    None when no row's calls asked the cache."""
    hits = sum(r.cache_hits for r in rows)
    misses = sum(r.cache_misses for r in rows)
    if not hits and not misses:
        return None
    return {"hits": hits, "misses": misses, "cost_saved": spend_sum(r.cached_cost for r in rows)}


def pricing_coverage(rows: Sequence[IndexRow]) -> dict[str, Any]:
    """Attempts whose agent reported tokens (`with_usage`), those of them with a cost
    (`priced`: reported, or from `pricing:`), and the models that had no price."""
    used = [r for r in rows if r.input_tokens is not None or r.output_tokens is not None]
    unpriced = {r.model or NO_MODEL for r in used if r.cost is None}
    priced = len(used) - sum(1 for r in used if r.cost is None)
    return {
        "priced": priced,
        "with_usage": len(used),
        "coverage": priced / len(used) if used else None,
        "unpriced_models": sorted(unpriced),
    }


def spend_lines(summary: Summary) -> list[str]:
    """The cost lines of the terminal section and summary.md (none when nothing cost); what
    the run paid in all when it is more than its recorded attempts cost."""
    tot, pricing = summary.totals, summary.pricing
    lines = []
    if tot.cost is not None:
        judge = tot.judge_cost
        split = f" (agent {tot.agent_cost or 0:.4f}, judge {judge:.4f})" if judge else ""
        lines.append(f"cost {tot.cost:.4f}{split}")
    paid = summary.spend
    if paid is not None and paid.calls and (tot.cost is None or abs(paid.cost - tot.cost) > 5e-5):
        lines.append(
            f"paid in all {paid.cost:.4f} for {paid.calls} model calls, {paid.tokens} tokens "
            "(every session, calls of attempts not recorded too)"
        )
    if pricing and pricing.with_usage:
        line = f"pricing coverage {pricing.priced}/{pricing.with_usage} attempts with usage"
        if pricing.unpriced_models:
            line += "; no price for: " + ", ".join(pricing.unpriced_models)
        lines.append(line)
    cache = summary.model_cache
    if cache is not None:
        saved = f", {cache.cost_saved:.4f} saved" if cache.cost_saved is not None else ""
        lines.append(f"model cache: {cache.hits} hits, {cache.misses} misses{saved}")
    return lines
