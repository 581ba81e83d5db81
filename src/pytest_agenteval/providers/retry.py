"""When a provider call is tried again, how long to wait first, and what a refusal means.

Pure decisions: a provider (`providers/seam.py`) classifies a failed request into an HTTP status
(None for a connection error) and asks here, so the record can say how many retries an answer
took.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import random
import time
from dataclasses import dataclass

DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 1.0
MAX_DELAY = 60.0
"""Longest wait before one retry, whatever the server's `Retry-After` asks."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a call is retried."""

    retries: int = DEFAULT_RETRIES
    backoff: float = DEFAULT_BACKOFF
    """Seconds before the first retry; doubled for each next one, with full jitter."""

    def delay(self, retry: int, retry_after: str | None, rng: random.Random) -> float:
        """Seconds to wait before retry number `retry` (0-based): the server's `Retry-After`
        when it gives one, else exponential backoff with jitter; at most MAX_DELAY."""
        asked = parse_retry_after(retry_after)
        if asked is not None:
            return min(asked, MAX_DELAY)
        ceiling = self.backoff * 2.0**retry
        return min(ceiling / 2 + rng.uniform(0, ceiling / 2), MAX_DELAY)


def retryable(status: int | None) -> bool:
    """Whether a failed call may succeed if tried again: a connection error or timeout
    (None), 408, 409 (a conflict the server asks to retry), 429 or any 5xx."""
    return status is None or status in (408, 409, 429) or status >= 500


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` as seconds from now: a number of seconds or an HTTP date (one past is
    0). None for anything else, so the backoff decides: no header, garbage, or a number that is
    negative or not finite (`nan` would be a timer the event loop can never order)."""
    if not value:
        return None
    seconds: float | None
    try:
        seconds = float(value)
    except ValueError:
        seconds = _until(value)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def _until(date: str) -> float | None:
    """Seconds until an HTTP date (GMT, as RFC 9110 says, when it names no zone)."""
    try:
        when = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max(when.timestamp() - time.time(), 0.0)


def what_to_check(status: int | None, *, key_env: str, model: str, base_url: str) -> str:
    """What a user should check after a call failed with `status` (never retried, or out of
    retries)."""
    if status == 401:
        return f"check the API key in the environment variable {key_env} (api_key_env)"
    if status == 403:
        return f"the key in {key_env} may not use model {model!r}; check its permissions"
    if status == 404:
        return f"check the model name {model!r} and base_url {base_url}"
    if status == 400:
        return "the server refused the request; check `params`, `max_tokens` and the input"
    if status == 429:
        return "rate limited: lower `limits: max_in_flight` or raise `retries`/`backoff`"
    if status is None:
        return f"could the server at {base_url} be reached? check base_url and the network"
    return "the provider failed; try again later or raise `retries`"
