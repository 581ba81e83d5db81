"""Money and time: a spend cap holds within the calls in flight at the server, limits hold for
calls given up on and in forked children, costs are finite, and durations tell the call from
the wait for a slot."""

from __future__ import annotations

import pytest

from chat_server import ChatServer
from helpers import DatasetMaker
from test_providers import KEY, KEY_ENV, openai_agent

SLOW_GRADER = """
import time


def grade(output):
    time.sleep(0.2)  # the main thread lags behind the calls in flight
    return output == "ok"
"""


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "n2"])
def test_spend_past_the_cap_is_at_most_the_calls_in_flight_at_the_server(
    pytester: pytest.Pytester, dataset: DatasetMaker, chat_server: ChatServer, workers: list[str]
) -> None:
    """With `max_in_flight: 4` at concurrency 16 and a main thread slower than the server, the
    spend past `--agenteval-max-cost` is at most 4 calls' cost (the server counts the calls)."""
    chat_server.reset(latency=0.1)
    root = dataset(
        {
            f"t{i:02}.yaml": {"input": "<<ok>>", "graders": [{"python": "slow:grade"}]}
            for i in range(24)
        },
        manifest={
            "agent": openai_agent(chat_server),
            "limits": {"max_in_flight": 4},
            # 100 prompt tokens at $1000 per million: $0.10 a call
            "pricing": {"served-model-1": {"input_per_mtok": 1000, "output_per_mtok": 0}},
        },
    )
    (root / "slow.py").write_text(SLOW_GRADER)
    cap, per_call = 0.35, 0.10
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "16", "--agenteval-max-cost", str(cap),
        *workers,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) > 0
    spent = len(chat_server.requests) * per_call
    assert spent >= cap
    assert spent - cap <= 4 * per_call + 1e-9, f"{len(chat_server.requests)} calls"
