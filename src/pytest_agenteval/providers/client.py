"""What every provider call shares: its two failures and the masking of API keys.

The API key is read from the environment once (`api_key`) and registered here; whatever a
provider returns or raises has every registered key masked (`mask`) before it leaves the
providers package: a server, a proxy or a model may quote the key back.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..core.errors import AgentError
from ..core.llm import ModelSettings

SHORTEST_MASKED = 12
"""Runs of this many characters of a key are masked wherever they appear (a server's excerpt
or pydantic's abbreviation of the key would leave parts of it)."""
_keys: set[str] = set()
"""Every key a provider of this process holds: `mask` hides all of them."""


class RequestTimeout(Exception):
    """A request that did not end within its wall-clock deadline (a retryable failure)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete reply within {seconds:g} s (the `timeout` setting)")


class ProviderError(AgentError):
    """A provider call that failed for good: refused, out of retries, or an unreadable reply.
    Infrastructure trouble, so the attempt is an *error*, never a failure."""

    error_type = "ProviderError"
    error_class = "provider_error"
    """`rate_limited` for a 429 after its retries, `timeout` for a request that timed out."""
    status: int | None = None
    """The HTTP status that ended the call, when one did."""
    billed: bool = False
    """The last try reached the server and got no refusal back (no reply in time, a reply
    that could not be read, the connection lost after the request was sent): the server may
    have billed it."""


def register_key(key: str) -> None:
    """A key this process holds: `mask` hides it from now on."""
    _keys.add(key)


def mask(text: str) -> str:
    """`text` with every key of this process masked as `***`: the whole key and any run of
    SHORTEST_MASKED of its characters (a server, a proxy or a model may quote it back)."""
    for key in _keys:
        shortest = min(SHORTEST_MASKED, len(key))
        # a text shorter than a run holds none (most JSON keys and words of a trace)
        if len(key) >= 4 and len(text) >= shortest:
            text = _mask_runs(text, key, shortest)
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
    runs = sorted(_key_runs(text, key, shortest))
    if not runs:  # the text as it is, not a copy
        return text
    merged: list[list[int]] = []
    for start, end in runs:
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


def api_key(settings: ModelSettings) -> str | None:
    """The key in the environment variable `api_key_env` names, or None when it is unset."""
    return os.environ.get(settings.key_env) or None
