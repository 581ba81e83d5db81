"""A provider's `requests_per_minute` and `tokens_per_minute`: token buckets every call of
every xdist worker draws from, tokens reserved before a request and settled after it."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import DatasetMaker
from model_server import ModelServer
from pytest_agenteval.core.llm import ProviderLimits
from pytest_agenteval.providers import rates as rates_module
from pytest_agenteval.providers.gate import FileGate, LocalGate, Window
from pytest_agenteval.providers.rates import _STATE, Buckets, Rates
from pytest_agenteval.providers.seam import Route


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


def _route(name: str = "local", **limits: int) -> Route:
    return Route(name, "openai", "http://127.0.0.1:9/v1", "LOCAL_KEY", ProviderLimits(**limits))


def test_an_unlimited_provider_is_admitted_without_a_bucket() -> None:
    """A provider with no per-minute limit neither waits nor keeps buckets; settling it (or a
    request that used what it reserved) changes nothing."""
    rates = Rates()
    asyncio.run(rates.admit(_route(max_in_flight=2), 10**9))
    rates.settle(_route(), 100, 10)
    rates.settle(_route(tokens_per_minute=600), 50, 50)
    assert rates._local == {}


def test_this_process_buckets_take_wait_and_settle() -> None:
    """Without a run folder the buckets are the process's: a request takes one request and its
    reservation; past the burst the next one waits for the refill instead of passing; settling
    returns what the answer did not use."""
    rates, route = Rates(), _route(requests_per_minute=1200, tokens_per_minute=60000)

    async def admit(times: int) -> None:
        for _ in range(times):
            await rates.admit(route, 10)

    start = time.time()
    asyncio.run(admit(20))  # the burst: one second's worth of requests
    buckets = rates._local[route.label]
    refilled = (buckets.at - start) * 20  # requests the refill gave since the start
    assert buckets.requests <= refilled + 1e-6
    assert buckets.tokens <= 1000 - 200 + refilled * 50 + 1e-6
    asyncio.run(admit(1))  # waited for the refill: taken, not lent
    assert buckets.requests <= (buckets.at - start) * 20 - 1 + 1e-6
    before = buckets.tokens
    rates.settle(route, 400, 100)
    assert buckets.tokens >= min(1000, before + 300) - 1e-6


def test_a_run_folder_shares_the_buckets_between_processes(tmp_path: Path) -> None:
    """Two processes' limits over one run folder draw from one file per provider: what one
    takes the other finds gone; a damaged file counts as a full bucket."""
    route = _route(requests_per_minute=60, tokens_per_minute=600)
    first, second = Rates(tmp_path / "providers"), Rates(tmp_path / "providers")
    asyncio.run(first.admit(route, 8))
    (path,) = (tmp_path / "providers").glob("local-*.rate")
    requests, tokens, _ = _STATE.unpack(path.read_bytes())
    assert requests == pytest.approx(0, abs=0.1) and tokens == pytest.approx(2, abs=0.2)
    wait = second._change(route, lambda b, r, t: b.take(1, r, t))
    assert 0 < wait <= 1.0  # the one request a second is the first's: until it refills
    second.settle(route, 8, 3)
    assert 7 - 1e-6 <= _STATE.unpack(path.read_bytes())[1] <= 10  # 5 back, and the refill
    path.write_bytes(b"torn")
    assert first._change(route, lambda b, r, t: b.take(10, r, t)) == 0.0
    assert _STATE.unpack(path.read_bytes())[:2] == pytest.approx((0, 0), abs=0.2)


def test_use_rates_sets_what_every_call_draws_from(tmp_path: Path) -> None:
    """The runtime's rates become the process's; None gives it back its own."""
    before = rates_module.current()
    shared = Rates(tmp_path)
    try:
        rates_module.use_rates(shared)
        assert rates_module.current() is shared
        rates_module.use_rates(None)
        assert rates_module.current() is not shared and rates_module.current().folder is None
    finally:
        rates_module.use_rates(before)


def test_a_429_halves_the_window_and_successes_regrow_it_slowly() -> None:
    """Multiplicative decrease to at most the level the 429 showed, additive increase only on
    a success that held the top slot, never past the ceiling."""
    window = Window(8, 8.0, 8.0)
    window.shrink(5)  # six were in flight: the server takes five
    assert (window.limit, window.cap, window.rate_limited) == (4.0, 5.0, 1)
    window.grow(1)  # not the top slot: no growth
    assert window.limit == 4.0
    window.grow(3)
    assert window.limit == pytest.approx(4.25) and window.cap == pytest.approx(5.01)
    window.shrink(None)
    window.shrink(None)
    window.shrink(0)
    assert window.limit == 1.0 and window.cap == 1.0 and window.rate_limited == 4
    full = Window(2, 2.0, 2.0)
    full.grow(1)
    assert full.limit == 2.0


def test_the_process_gate_shrinks_on_429_and_on_no_requests_remaining() -> None:
    """A 429, or a success saying no requests remain, halves the limit in flight; the status
    names the provider with its limit and 429 count; a provider without max_in_flight has no
    window."""
    gate, route = LocalGate(), _route(max_in_flight=4)

    async def held() -> int | None:
        async with gate.hold(route, 1) as slot:
            return slot

    assert asyncio.run(held()) == 0
    gate.rate_limited(route, 3)
    assert gate.status() == {"local": {"limit": 2, "max_in_flight": 4, "rate_limited": 1}}
    gate.succeeded(route, {"x-ratelimit-remaining-requests": "0"}, 1)
    assert gate.status()["local"] == {"limit": 1, "max_in_flight": 4, "rate_limited": 2}
    gate.succeeded(route, {}, 0)  # held the top slot: grows, as slowly as its cap creeps
    assert gate.windows[route.label].limit == pytest.approx(1.05)
    gate.rate_limited(_route("other"), 0)
    assert list(gate.status()) == ["local"]


def test_the_run_gate_shares_slots_limit_and_429s_through_files(tmp_path: Path) -> None:
    """Two processes' gates over one folder: a held slot is taken for both, a 429 one saw
    lowers the limit the other reads, a success at the top slot regrows it, status reads the
    state file."""
    route = _route(max_in_flight=4)
    first, second = FileGate(tmp_path), FileGate(tmp_path)

    async def both() -> tuple[int | None, int | None]:
        async with first.hold(route, 1) as one, second.hold(route, 1) as two:
            return one, two

    assert asyncio.run(both()) == (0, 1)
    assert second.status() == {}  # no 429 yet: no state
    first.rate_limited(route, 2)
    assert second.status() == {"local": {"limit": 2, "max_in_flight": 4, "rate_limited": 1}}
    second.succeeded(route, {}, 0)  # not the top slot of two: unchanged
    second.succeeded(route, {}, None)
    assert first.status()["local"]["limit"] == 2
    second.succeeded(route, {}, 1)
    state = first._state(first._base(route), 4)
    assert state.limit == pytest.approx(2.025) and state.rate_limited == 1  # the cap creeps
    first.succeeded(route, {"x-ratelimit-remaining-requests": "0"}, 1)
    assert second.status()["local"] == {"limit": 1, "max_in_flight": 4, "rate_limited": 2}
    unlimited = _route("free")
    first.rate_limited(unlimited, 0)
    first.succeeded(unlimited, {}, 0)

    async def free() -> int | None:
        async with first.hold(unlimited, 1) as slot:
            return slot

    assert asyncio.run(free()) is None
    assert list(first.status()) == ["local"]


def test_one_process_calls_on_the_run_gate_never_share_a_slot(tmp_path: Path) -> None:
    """The run's gate keeps its slot files open: calls of one process still take distinct
    slots, a third waits at a limit of two until one is given back (then reuses that slot),
    another process's gate sees the slots held, and a forked child opens files of its own."""
    route = _route(max_in_flight=2)
    gate, other = FileGate(tmp_path), FileGate(tmp_path)
    taken: list[int | None] = []

    async def call(release: asyncio.Event) -> None:
        async with gate.hold(route, 1) as slot:
            taken.append(slot)
            await release.wait()

    async def calls() -> None:
        first, second = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(call(first)), asyncio.create_task(call(second))]
        third = asyncio.create_task(call(second))
        await asyncio.sleep(0.05)
        assert taken == [0, 1]  # the third waits: both slots are held
        assert other._claim(f"{other._base(route)}.slot0") is None  # held for every process
        first.set()
        await asyncio.sleep(0.05)
        assert taken == [0, 1, 0]  # the slot given back, taken again
        second.set()
        await asyncio.gather(*tasks, third)

    asyncio.run(calls())
    opened = dict(gate._files)
    assert len(opened) == 2  # one file per slot, opened once
    pid = os.fork()
    if pid == 0:  # the child: its parent's descriptors are not its own
        fd = gate._claim(f"{gate._base(route)}.slot0")
        os._exit(0 if fd is not None and fd not in opened.values() else 1)
    assert os.waitpid(pid, 0)[1] == 0
    gate.close()
    other.close()
    assert gate._files == {}


def _killed_holding(folder: Path, route: Route) -> None:
    """A child process takes a slot of `route` on the run gate and is SIGKILLed holding it."""
    pid = os.fork()
    if pid == 0:

        async def die_holding() -> None:
            async with FileGate(folder).hold(route, 1):
                os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(die_holding())
        os._exit(1)
    assert os.waitpid(pid, 0)[1] == signal.SIGKILL


def test_a_dead_holders_slot_stays_taken_for_its_requests_timeout(tmp_path: Path) -> None:
    """A process killed holding a slot of the run gate leaves its request at the provider: the
    slot (its lock freed by the kernel) stays taken until the request's timeout has passed,
    while a slot given back normally, or whose dead holder's timeout is over, is free."""
    long = replace(_route(max_in_flight=2), timeout=3600)
    _killed_holding(tmp_path, long)
    gate = FileGate(tmp_path)
    base = gate._base(long)
    assert gate._claim(f"{base}.slot0") is None  # the dead call's request may still be out
    assert FileGate(tmp_path)._claim(f"{base}.slot0") is None  # for every process

    async def one() -> int | None:
        async with gate.hold(long, 1) as slot:
            return slot

    assert asyncio.run(one()) == 1  # the next slot is free
    assert asyncio.run(one()) == 1  # and given back clean: free again
    over = replace(_route("short", max_in_flight=1), timeout=0)
    _killed_holding(tmp_path, over)
    assert gate._claim(f"{gate._base(over)}.slot0") is not None  # its timeout is over
    gate.close()


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
