"""Money exact: no reply shape passes a cap, the run's ledger forgets nothing across sessions,
kill -9 included, a cap waits for the calls in flight instead of stopping, and an approximate
cap is said before anything is spent. The end-to-end runs count what the chat server billed."""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker, default_sigint, latest_run, summary_of
from pytest_agenteval.core.chat import ChatMessage
from pytest_agenteval.core.errors import StoreError
from pytest_agenteval.core.llm import ModelPrice
from pytest_agenteval.core.pids import start_time
from pytest_agenteval.core.text import dollars
from pytest_agenteval.providers.bound import BoundClient
from pytest_agenteval.providers.client import ProviderError
from pytest_agenteval.providers.seam import Route, forget, provider, run_sync
from pytest_agenteval.store import ledger as ledger_module
from pytest_agenteval.store.ledger import LEDGER_FILE, Book, Ledger, Paid, run_spend
from pytest_agenteval.store.stops import Stops, request_cancel
from test_providers import KEY, KEY_ENV, openai_agent

PER_MTOK = 1000.0
"""The test price of a token, input and output: $0.001 each."""


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def _manifest(server: ChatServer, **agent: Any) -> dict[str, Any]:
    return {
        "agent": openai_agent(server, **agent),
        "pricing": {"test-model": {"input_per_mtok": PER_MTOK, "output_per_mtok": PER_MTOK}},
    }


def _tasks(n: int) -> dict[str, Any]:
    return {f"t{i:02}.yaml": {"input": "<<ok>>", "expected": "ok"} for i in range(n)}


def _served_tokens(server: ChatServer) -> int:
    """The tokens the server billed (every reply's usage, sent or not)."""
    used = [server.script.used(body, 0) for body in server.requests]
    return sum(int(u["prompt_tokens"]) + int(u["completion_tokens"]) for u in used)


# Item 1: a reply without usage, or naming an unpriced model, keeps its reservation.


@pytest.mark.parametrize(
    ("shape", "cap", "workers"),
    [
        ("no_usage", "cost", []),
        ("no_usage", "tokens", []),
        ("unknown_model", "cost", []),
        pytest.param("no_usage", "cost", ["-n", "2"], marks=pytest.mark.slow),
    ],
)
def test_no_reply_shape_passes_a_cap(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    shape: str,
    cap: str,
    workers: list[str],
) -> None:
    """Replies without `usage`, or naming a model absent from `pricing:`, at concurrency 4:
    what the server billed stays under the cost (or token) cap, the run stops at `budget`,
    summary.json's `spend` counts at least what was billed, and an unpriced reply model is
    said once."""
    chat_server.reset(
        latency=0.02,
        send_usage=shape != "no_usage",
        model="test-model" if shape == "no_usage" else "served-model-1",
        usage={"prompt_tokens": 30, "completion_tokens": 20},  # fewer tokens than bytes
        price=(PER_MTOK, PER_MTOK),
    )
    dataset(_tasks(20), manifest=_manifest(chat_server, max_tokens=20))
    flag, limit = (
        ("--agenteval-max-cost", 0.5) if cap == "cost" else ("--agenteval-max-tokens", 500)
    )
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "4", flag, str(limit), *workers
    )
    summary = summary_of(pytester)
    assert summary["status"] == "budget", result.stdout.str()
    billed = chat_server.bill() if cap == "cost" else _served_tokens(chat_server)
    assert 0 < billed <= limit
    spent = summary["spend"]["cost" if cap == "cost" else "tokens"]
    assert billed <= spent + 1e-9 and spent <= limit + 1e-9
    warned = [line for line in result.stderr.lines if "has no price in the manifest" in line]
    assert len(warned) == (1 if shape == "unknown_model" else 0), result.stderr.str()
    if shape == "unknown_model":
        assert "'served-model-1'" in warned[0] and "price of the model asked for" in warned[0]


def test_a_reply_priced_at_the_asked_model_when_it_names_an_unpriced_one(
    chat_server: ChatServer, tmp_path: Path
) -> None:
    """A reply naming a model without a price costs what the asked model's price says, in the
    reply and in the run's ledger; a reply without usage, or with half of it, settles at its
    reservation."""
    route = Route("local", "openai", chat_server.base_url, KEY_ENV, retries=0)
    pricing = {"asked": ModelPrice(input_per_mtok=PER_MTOK, output_per_mtok=PER_MTOK)}
    stops = Stops(tmp_path)
    client = BoundClient(provider(route), None, "asked", spend=stops, pricing=pricing)
    try:
        reply = client.chat([{"role": "user", "content": "<<x>>"}], max_tokens=10)
        assert reply.cost == pytest.approx(0.12)  # 100 prompt and 20 completion tokens
        assert stops.ledger.read().settled == Paid(pytest.approx(0.12), 120, 1)  # type: ignore[arg-type]
        chat_server.reset(send_usage=False)
        request = client.provider.prepare(
            "asked", [ChatMessage("user", "<<y>>")], (), {"max_tokens": 10}
        )
        worst_cost, worst_tokens = client.worst(request)
        assert worst_cost is not None and worst_tokens is not None
        run_sync(client.exchange(request))
        chat_server.reset(usage={"prompt_tokens": 3})  # no completion tokens said
        run_sync(client.exchange(request))
        settled = stops.ledger.read().settled
        assert settled.cost == pytest.approx(0.12 + 2 * worst_cost)
        assert (settled.tokens, settled.calls) == (120 + 2 * worst_tokens, 3)
        assert stops.ledger.read().held == {}
    finally:
        forget()


# Item 2: the ledger is durable, never reset, and knows what killed processes held.


def _session(pytester: pytest.Pytester, cap: float, *more: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-max-cost", str(cap), *more
    )


@pytest.mark.slow
def test_the_ledger_counts_every_paid_call_across_cap_stops_kill_and_resumes(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """Cap stops, resumes with higher run-wide caps, a kill -9 with calls at the server, and a
    last resume, under -n 2: no session lets the server's bill pass its cap, the spent tokens
    never go down, and summary.json's `spend.cost` is what the server was paid (a killed
    call counted at its reservation, which this server bills)."""
    chat_server.reset(model="test-model", bill_worst=True, price=(PER_MTOK, PER_MTOK))
    dataset(_tasks(16), manifest=_manifest(chat_server, max_tokens=20))
    tokens = []
    for cap, more in ((0.5, ()), (1.0, ("--resume-suite",))):
        _session(pytester, cap, *more)
        summary = summary_of(pytester)
        assert summary["status"] == "budget"
        assert 0 < chat_server.bill() <= cap
        assert summary["spend"]["cost"] == pytest.approx(chat_server.bill())
        assert summary["spend"]["calls"] == len(chat_server.requests)
        tokens.append(summary["spend"]["tokens"])
    assert tokens[0] < tokens[1]
    chat_server.script.latency = 30.0  # the next calls stay at the server until the kill
    proc = pytester.popen(
        [sys.executable, "-m", "pytest", "--agenteval", "ds", "-n", "2", "--resume-suite",
         "--agenteval-max-cost", "100"],
        stdin=None,  # type: ignore[arg-type]
        start_new_session=True,
        preexec_fn=default_sigint,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while chat_server.in_flight < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert chat_server.in_flight == 2
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    assert Ledger(run).read().holding().calls == 2  # the killed workers' calls in flight
    chat_server.script.latency = 0.0
    result = _session(pytester, 100, "--resume-suite")
    summary = summary_of(pytester)
    assert summary["status"] == "complete", result.stdout.str()
    assert summary["spend"]["cost"] == pytest.approx(chat_server.bill())
    assert summary["spend"]["calls"] == len(chat_server.requests)
    assert summary["spend"]["tokens"] > tokens[1]
    assert summary["totals"]["cost"] < summary["spend"]["cost"]  # unrecorded calls were paid
    assert Ledger(run).read().held == {}


def test_a_resume_counts_what_earlier_sessions_paid(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """A session stopped at its cap, then a resume with a higher run-wide cap: the ledger is
    not reset to the recorded attempts' spend, so the server's bill stays under the second
    cap and `spend.cost` equals it; the stop line says what was spent in all."""
    chat_server.reset(model="test-model", bill_worst=True, price=(PER_MTOK, PER_MTOK))
    dataset(_tasks(12), manifest=_manifest(chat_server, max_tokens=20))
    args = ["--agenteval", "ds", "--agenteval-concurrency", "4"]
    pytester.runpytest_subprocess(*args, "--agenteval-max-cost", "0.4")
    first = chat_server.bill()
    assert 0 < first <= 0.4
    again = pytester.runpytest_subprocess(*args, "--resume-suite", "--agenteval-max-cost", "0.8")
    summary = summary_of(pytester)
    assert summary["status"] == "budget"
    assert first < chat_server.bill() <= 0.8
    assert summary["spend"]["cost"] == pytest.approx(chat_server.bill())
    again.stdout.fnmatch_lines([f"*spent in all {dollars(chat_server.bill())}*"])


def test_a_dead_process_s_reservations_are_settled_not_forgotten(tmp_path: Path) -> None:
    """A reservation held by a process that is gone counts as paid at its reservation when
    the ledger is swept; a live holder's stays held; an older 16-byte ledger's totals are
    taken as settled."""
    child = subprocess.run(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from pytest_agenteval.store.ledger import "
         "Ledger, Paid; Ledger(Path(sys.argv[1])).hold(Paid(0.25, 300, 1))", str(tmp_path)],
        check=True,
    )  # fmt: skip
    assert child.returncode == 0
    ledger = Ledger(tmp_path)
    assert ledger.read().holding() == Paid(0.25, 300, 1)
    ledger.hold(Paid(0.5, 10, 1))  # this process: alive, so held
    assert ledger.read().settled == Paid()  # a call's hold reads no other holder's /proc
    ledger.sweep()
    book = ledger.read()
    assert book.settled == Paid(0.25, 300, 1) and book.holding() == Paid(0.5, 10, 1)
    assert ledger.paid() == Paid(0.75, 310, 2)
    old = tmp_path / "old"
    old.mkdir()
    (old / "spend").write_bytes(b"\x00\x00\x00\x00\x00\x00\xf0?" + (7).to_bytes(8, "little"))
    assert Ledger(old).read().settled == Paid(1.0, 7, 0)


def _held_by_a_gone_process(folder: Path, cost: float) -> None:
    """A process that holds `cost` (and 300 tokens, one call) in the ledger, then ends."""
    subprocess.run(
        [sys.executable, "-c",
         "import sys; from pathlib import Path; from pytest_agenteval.store.ledger import "
         "Ledger, Paid; Ledger(Path(sys.argv[1])).hold(Paid(float(sys.argv[2]), 300, 1))",
         str(folder), str(cost)],
        check=True,
    )  # fmt: skip


def test_a_gone_process_s_slot_is_settled_freed_and_reused(tmp_path: Path) -> None:
    """A sweep settles a gone process's reservation and frees its slot; the next process
    takes that slot (the file does not grow by a slot per process ever run) and the settled
    spend stays counted; a forked child holds in a slot of its own."""
    path = tmp_path / LEDGER_FILE
    _held_by_a_gone_process(tmp_path, 0.25)
    assert path.stat().st_size == 128  # the header and one slot
    ledger = Ledger(tmp_path)
    ledger.sweep()
    assert ledger.read() == Book(Paid(0.25, 300, 1), {})
    _held_by_a_gone_process(tmp_path, 0.5)
    assert path.stat().st_size == 128
    assert ledger.read().holding() == Paid(0.5, 300, 1)
    ledger.sweep()
    ledger.hold(Paid(0.125, 1, 1))
    pid = os.fork()
    if pid == 0:  # the child holds through the parent's ledger, then is killed holding
        try:
            ledger.hold(Paid(1.0, 2, 1))
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    assert ledger.read().holding() == Paid(1.125, 3, 2)
    ledger.sweep()
    assert ledger.read() == Book(
        Paid(1.75, 602, 3), {f"{os.getpid()} {start_time(os.getpid())}": Paid(0.125, 1, 1)}
    )
    assert path.stat().st_size == 192  # this process's slot and the child's (freed) one
    assert run_spend(tmp_path) == {"cost": 1.875, "tokens": 603, "calls": 4}


def test_a_full_ledger_frees_the_slots_of_gone_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that finds every slot taken frees those of gone processes (their spend
    settled) and takes one; with every holder alive, it is a StoreError, not a bigger file."""
    _held_by_a_gone_process(tmp_path, 0.25)
    _held_by_a_gone_process(tmp_path, 0.5)
    monkeypatch.setattr(ledger_module, "SLOTS", 2)
    ledger = Ledger(tmp_path)
    ledger.hold(Paid(1.0, 1, 1))
    assert (tmp_path / LEDGER_FILE).stat().st_size == 64 * 3  # the header and two slots
    assert ledger.read().settled == Paid(0.75, 600, 2)
    assert ledger.read().holding() == Paid(1.0, 1, 1)
    monkeypatch.setattr(ledger_module, "SLOTS", 1)
    pid = os.fork()
    if pid == 0:  # a second live holder finds the one slot taken by a live process
        said = ""
        try:
            ledger.hold(Paid(1.0, 1, 1))
        except BaseException as exc:
            said = str(exc)
        finally:
            os._exit(3 if "spend.ledger: more than 1 processes hold spend" in said else 2)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 3


def test_a_call_does_not_wait_for_what_a_gone_process_holds(tmp_path: Path) -> None:
    """Under a cap, a call that does not fit beside a gone process's reservation does not wait
    for it to settle (it never will): it is settled at its reservation, and the run stops
    since the call cannot fit beside it."""
    _held_by_a_gone_process(tmp_path, 0.75)
    stops = Stops(tmp_path, max_cost=1.0)
    reason = asyncio.run(asyncio.wait_for(stops.reserve(0.5, 10), 30))
    assert (
        reason
        == "spend cap reached: $0.75 spent and $0.00 held of $1.00, the next call may cost $0.5000"
    )
    assert stops.ledger.read() == Book(Paid(0.75, 300, 1), {})


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda b: b"agenteval.spend/3".ljust(24, b"\0") + b[24:],
         r"is 'agenteval.spend/3', newer than this version reads \('agenteval.spend/2'\); "
         "upgrade pytest-agenteval"),
        (lambda b: b"{" + b[1:], r"not a spend ledger \(no magic 'agenteval.spend/2'\)"),
        (lambda b: b[:100], r"the spend ledger is damaged \(100 bytes\)"),
        (lambda b: b[:64] + struct.pack("<qqdqqdqq", 1, 1, math.nan, 0, 0, 0, 0, 0),
         r"the spend ledger is damaged \(nan, 0, 0\)"),
    ],
)  # fmt: skip
def test_a_damaged_or_newer_ledger_is_refused(
    tmp_path: Path, change: Callable[[bytes], bytes], said: str
) -> None:
    """A ledger of a newer format, one without the magic, one cut short or holding no number
    is a StoreError naming the file and what is wrong, to a call and to the summary."""
    Ledger(tmp_path).hold(Paid(0.5, 10, 1))
    path = tmp_path / LEDGER_FILE
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(StoreError, match=re.escape(str(path)) + ": .*" + said):
        Ledger(tmp_path).hold(Paid(0.5, 10, 1))
    with pytest.raises(StoreError, match=said):
        run_spend(tmp_path)


# Item 3: a call that does not fit waits for the calls in flight.


def test_a_call_that_does_not_fit_waits_for_the_calls_in_flight(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """Sonnet-like prices and max_tokens 4096 reserve about $0.06 a call while each costs
    $0.0006: under a $0.20 cap at concurrency 4 on -n 2, all ten attempts run in one session
    (calls that do not fit wait for those in flight to settle)."""
    chat_server.reset(model="test-model", latency=0.05)
    manifest = _manifest(chat_server, max_tokens=4096)
    manifest["pricing"] = {"test-model": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}
    dataset(_tasks(10), manifest=manifest)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "4", "-n", "2",
        "--agenteval-max-cost", "0.20",
    )  # fmt: skip
    result.assert_outcomes(passed=10)
    summary = summary_of(pytester)
    assert summary["status"] == "complete"
    assert summary["spend"]["cost"] == pytest.approx(10 * (100 * 3 + 20 * 15) / 1e6)


def test_a_waiting_call_is_admitted_when_room_is_given_back_and_ends_at_a_stop(
    tmp_path: Path,
) -> None:
    """A reservation that does not fit while another is held waits; it is admitted once the
    other settles; a waiting call ends at a cancel, and a cancelled wait holds nothing."""

    async def scenario() -> None:
        stops = Stops(tmp_path, max_cost=1.0)
        assert await stops.reserve(0.8, 10) is None
        waiting = asyncio.ensure_future(stops.reserve(0.5, 10))
        await asyncio.sleep(0.1)
        assert not waiting.done()  # 0.8 held + 0.5 > 1.0, but 0.5 alone fits
        stops.settle((0.8, 10), (0.1, 5))
        assert await waiting is None
        assert stops.ledger.read().holding() == Paid(0.5, 10, 1)
        timed = asyncio.ensure_future(stops.reserve(0.6, 10))
        await asyncio.sleep(0.05)
        timed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await timed
        assert stops.ledger.read().holding() == Paid(0.5, 10, 1)
        stopped = asyncio.ensure_future(stops.reserve(0.6, 10))
        await asyncio.sleep(0.05)
        request_cancel(tmp_path)
        assert await stopped == "cancelled"
        assert stops.ledger.read().holding() == Paid(0.5, 10, 1)
        assert await Stops(tmp_path / "x", max_cost=1.0).reserve(1.5, 0) is not None

    asyncio.run(scenario())


# Item 5: approximate caps said before spending; a cancelled call settles at its reservation.


def test_max_completion_tokens_bounds_the_reservation() -> None:
    """A request that sends `max_completion_tokens` (and no `max_tokens`) reserves it."""
    route = Route("local", "openai", "http://127.0.0.1:9/v1", KEY_ENV)
    request = provider(route).prepare(
        "m", [ChatMessage("user", "hi")], (), {"max_completion_tokens": 50}
    )
    assert request.max_tokens == 50
    client = BoundClient(provider(route), None, "m")
    assert client.worst(request) == (None, len(request.body) + 50)


def test_a_call_cancelled_after_it_was_sent_settles_at_its_reservation(
    chat_server: ChatServer, tmp_path: Path
) -> None:
    """A call cancelled while the server works on it is counted at its reservation (the
    server may bill it), not at $0."""
    chat_server.reset(latency=5.0)
    route = Route("local", "openai", chat_server.base_url, KEY_ENV, retries=0)
    pricing = {"m": ModelPrice(input_per_mtok=PER_MTOK, output_per_mtok=PER_MTOK)}
    stops = Stops(tmp_path, max_cost=10.0)
    client = BoundClient(provider(route), None, "m", spend=stops, pricing=pricing)
    request = client.provider.prepare("m", [ChatMessage("user", "hi")], (), {"max_tokens": 10})
    worst_cost, worst_tokens = client.worst(request)

    async def cancelled() -> None:
        call = asyncio.ensure_future(client.exchange(request))
        while chat_server.in_flight == 0:
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    try:
        run_sync(cancelled())
    finally:
        forget()
    book = stops.ledger.read()
    assert book.held == {}
    assert book.settled == Paid(pytest.approx(worst_cost), worst_tokens, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("script", "billed"),
    [({"malformed": True}, True), ({"statuses": [500]}, False)],
    ids=["unreadable 200: counted", "refused with a 500: given back"],
)
def test_a_failed_call_is_counted_only_when_the_server_may_have_billed_it(
    chat_server: ChatServer, tmp_path: Path, script: dict[str, Any], billed: bool
) -> None:
    """A call whose reply came but could not be read settles at its reservation (the server
    answered, so it billed); one the server refused with a status gives its reservation
    back."""
    chat_server.reset(**script)
    route = Route("local", "openai", chat_server.base_url, KEY_ENV, retries=0)
    pricing = {"m": ModelPrice(input_per_mtok=PER_MTOK, output_per_mtok=PER_MTOK)}
    stops = Stops(tmp_path, max_cost=10.0)
    client = BoundClient(provider(route), None, "m", spend=stops, pricing=pricing)
    request = client.provider.prepare("m", [ChatMessage("user", "hi")], (), {"max_tokens": 10})
    worst_cost, worst_tokens = client.worst(request)
    try:
        with pytest.raises(ProviderError) as raised:
            run_sync(client.exchange(request))
    finally:
        forget()
    assert raised.value.billed is billed
    book = stops.ledger.read()
    assert book.held == {}
    expected = Paid(pytest.approx(worst_cost), worst_tokens, 1) if billed else Paid()  # type: ignore[arg-type]
    assert book.settled == expected


def test_an_approximate_cap_is_said_once_before_spending(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer
) -> None:
    """Under a cost cap, an agent that sends no max_tokens and a judge whose model has no
    price are named in one warning at the session's start; a bounded, priced run says none."""
    rubric = 'good? <<{"score": 1, "reason": "ok"}>>'
    tasks = {
        "t.yaml": {"input": "<<ok>>", "expected": "ok", "graders": ["equals", {"judge": rubric}]}
    }
    manifest = _manifest(chat_server)
    manifest["judge"] = {"model": "judge-model", "base_url": chat_server.base_url,
                         "api_key_env": KEY_ENV, "max_tokens": 50}  # fmt: skip
    dataset(tasks, manifest=manifest)
    args = ["--agenteval", "ds", "--agenteval-no-probe", "--agenteval-max-cost", "5"]
    result = pytester.runpytest_subprocess(*args)
    warned = [line for line in result.stderr.lines if "cap is approximate" in line]
    assert len(warned) == 1, result.stderr.str()
    assert "agent [ds] (sends no max_tokens)" in warned[0]
    assert "judges [ds] (model 'judge-model' has no price)" in warned[0]
    dataset(_tasks(1), folder="ds2", manifest=_manifest(chat_server, max_tokens=20))
    quiet = pytester.runpytest_subprocess("--agenteval", "ds2", *args[2:])
    assert "cap is approximate" not in quiet.stderr.str()
