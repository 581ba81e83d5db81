"""A provider's `requests_per_minute` and `tokens_per_minute`: token buckets every call of
every xdist worker draws from, tokens reserved before a request and settled after it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import DatasetMaker
from model_server import ModelServer
from pytest_agenteval.providers.rates import Buckets


def _most_in_window(times: list[float], window: float) -> int:
    """The most requests any span of `window` seconds saw."""
    return max(sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times))


@given(
    rpm=st.integers(1, 6000),
    gaps=st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=60),
)
def test_requests_bucket_never_lends_more_than_rate_and_burst(rpm: int, gaps: list[float]) -> None:
    """Whatever the timing of asks, the requests taken in any span of T seconds are at most
    one second's burst plus T at the rate."""
    buckets, now, taken = Buckets(max(1.0, rpm / 60), 0.0, 0.0), 0.0, 0
    for gap in gaps:
        now += gap
        buckets.refill(now, rpm, None)
        if buckets.take(1, rpm, None) == 0.0:
            taken += 1
    assert taken <= max(1.0, rpm / 60) + now * rpm / 60 + 1e-6


def test_a_wait_is_until_the_bucket_has_enough_and_settling_gives_back() -> None:
    """An empty bucket says how long until the ask fits; tokens reserved and not used return;
    a reservation larger than the bucket passes once it is full, leaving it in debt."""
    buckets = Buckets(1.0, 100.0, 0.0)
    assert buckets.take(100, 60, 6000) == 0.0
    assert buckets.take(50, 60, 6000) == pytest.approx(1.0)  # a request a second
    buckets.refill(1.0, 60, 6000)
    assert buckets.take(50, 60, 6000) == 0.0 and buckets.tokens == pytest.approx(50)
    buckets.settle(50, 20, 6000)  # reserved 50, used 20
    assert buckets.tokens == pytest.approx(80)
    buckets.settle(10, 30, 6000)  # used more than it reserved
    assert buckets.tokens == pytest.approx(60)
    buckets.refill(2.0, 60, 6000)
    assert buckets.take(500, 60, 6000) == 0.0 and buckets.tokens == pytest.approx(-400)


def _manifest(server: ModelServer, limits: dict[str, int]) -> dict[str, Any]:
    return {
        "providers": {
            "local": {
                "openai": {"base_url": server.base_url, "api_key_env": "LOCAL_KEY"},
                "limits": limits,
            }
        },
        "agent": {"openai": {"model": "m1", "provider": "local", "max_tokens": 30}},
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("limits", "per_request"),
    [({"requests_per_minute": 240}, None), ({"tokens_per_minute": 14400}, 120)],
    ids=["requests", "tokens"],
)
def test_per_minute_limits_hold_across_workers(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    model_server: ModelServer,
    monkeypatch: pytest.MonkeyPatch,
    limits: dict[str, int],
    per_request: int | None,
) -> None:
    """20 attempts at concurrency 8 under -n 2: the requests (or the tokens they used, 120
    each) the server saw in any span of T seconds stay within one second's burst plus T at
    the limit's rate, the two workers together; a little slack for a reservation in flight."""
    monkeypatch.setenv("LOCAL_KEY", "local-key-abcdefghijkl")
    tasks = {f"t{i:02}.yaml": {"input": f"{i} <<ok>>", "expected": "ok"} for i in range(20)}
    dataset(tasks, manifest=_manifest(model_server, limits))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "8", "-n", "2"
    )
    result.assert_outcomes(passed=20)
    times = model_server.arrivals
    assert len(times) == 20
    ((name, per_minute),) = limits.items()
    weight = per_request or 1
    slack = 1 if per_request is None else 2  # reservations (body + max_tokens) not yet settled
    rate = per_minute / 60 / weight  # requests a second the limit allows
    for window in (0.5, 1.0, 2.0):
        most = _most_in_window(times, window)
        assert most <= max(1.0, rate) + rate * window + slack, (name, window, most)
    assert _most_in_window(times, 60.0) == 20
