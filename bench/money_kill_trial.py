"""Money kill trial: a process killed at a random moment loses nothing, pays nothing twice, and
the run's spend ledger (summary.json `spend`) agrees with what the server billed.

Each repetition runs 24 tasks under three `openai` variants and a `judge` grader, every model
call through one provider to a chat server of this process on 127.0.0.1 (`-n 2
--agenteval-concurrency 16`, `--agenteval-max-cost` far above the bill), SIGKILLs one xdist
worker or the whole process group (alternately) when the server has received a random number
of the run's 144 requests (then up to 0.1 s later; none: at a random time in the session's
first 3 s, during collection or the probe); every sixth repetition kills nothing (the
control), and every sixth after it runs its first session under a spend cap that stops it
(a sixth to four fifths of the bill). Then `--resume-suite` (cap $100) until the run is
complete.

The server's bill: a request is billed when its whole body has arrived, at the usage its reply
will carry, priced from the manifest's `pricing:`; a GET (the probe's models list) is free. The
client reserves a call's worst case in the ledger before sending it (the body's bytes as input
tokens, `max_tokens` as output, at the asked model's price) and settles it to the reply's cost
once the reply is read, so a call is in the ledger at its worst case from before it can be
billed until it is settled to exactly its bill. A kill freezes the calls in flight in the killed
processes at their reservation: those not yet at the server (billed nothing) and those there
(billed at most their reservation). Checked, with F the calls that may be in flight in the
killed processes (concurrency + 1 per process: 16 in the pool, one judge on pytest's thread; 0
without a kill) and W the largest worst case of any request the server received:

- the ledger: bill <= spend.cost <= bill + F x W (1e-9 for float rounding), the same for
  tokens, and calls <= spend.calls <= calls + F; without a kill spend equals the bill;
- nothing paid twice: no request (an agent's or a judge's; the prompt names its task and
  variant) arrives for an attempt whose record records.jsonl held committed at its arrival;
- nothing lost: the resumed run holds every task x variant passed, and no committed record is
  followed by another line for its attempt;
- without a kill, exactly two requests per attempt (its agent, its judge);
- under a cap, the capped session was billed no more than the cap (every call reserved
  its worst case first).

A summary.json without `spend` is a violation ("summary.json has no spend").

    python bench/money_kill_trial.py                 # 20 repetitions
    python bench/money_kill_trial.py --reps 5 --seed 7
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from trial_runs import (
    Key,
    committed,
    pytest_run,
    records,
    replaced,
    resume_until_complete,
    run_dir,
    workers,
)

from local_server import JsonHandler, LocalServer, encoded

TASKS = 24
CONCURRENCY = 16
MAX_TOKENS = 64
KEY_ENV = "MONEY_TRIAL_KEY"
PRICES = {"small": (0.5, 2.0), "large": (5.0, 20.0), "judge": (3.0, 15.0)}
"""US dollars per million input and output tokens, by model."""
VARIANTS = {"small": ("small", MAX_TOKENS), "large": ("large", MAX_TOKENS), "terse": ("small", 24)}
"""Each variant's model and max_tokens."""
KINDS = ("worker", "group", "worker", "group", "none", "cap")
"""What repetition i does to its first session: KINDS[i % 6] (kill a worker, the group, nothing,
or run it under a spend cap that stops it)."""
ARGS = [
    "-p", "xdist", "-n", "2", "--agenteval-concurrency", str(CONCURRENCY), "--agenteval", "ds",
    "--agenteval-max-cost", "100", "-q",
]  # fmt: skip
NO_SPEND = "summary.json has no spend"
RUBRIC = "Does the output name the task of the input? Grade it."
JUDGED = re.compile(r"answer (t\d+) ([\w-]+)")


@dataclass
class Bill:
    """What the server received during one repetition."""

    calls: int = 0
    cost: float = 0.0
    tokens: int = 0
    worst_cost: float = 0.0
    """The largest worst case (the client's reservation) of a request received."""
    worst_tokens: int = 0
    requests: Counter[Key] = field(default_factory=Counter)
    twice: list[str] = field(default_factory=list)
    """Requests for an attempt committed before they arrived."""
    unknown: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0


class BillingServer(LocalServer):
    """An OpenAI-compatible chat server that bills each request as it arrives and says, from
    the run's records.jsonl, whether its attempt was committed already."""

    def __init__(self, seed: int) -> None:
        self.bill = Bill()
        self.run_root: Path | None = None
        self._lock = threading.Lock()
        self._latency = random.Random(seed)
        super().__init__(_handler(self))

    def reset(self, root: Path) -> None:
        """A new repetition whose run lives in `root`."""
        with self._lock:
            self.bill, self.run_root = Bill(), root

    def arrive(self, body: dict[str, Any], length: int) -> dict[str, Any]:
        """Bill a request whose `length` bytes arrived; its reply."""
        model = str(body.get("model"))
        text, key, kind = _answer(body)
        prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages", []))
        usage = {"prompt_tokens": math.ceil(prompt / 4), "completion_tokens": len(text) // 4 + 1}
        tokens = usage["prompt_tokens"] + usage["completion_tokens"]
        done = committed(records(self.run_root, partial=True)) if self.run_root else set()
        with self._lock:
            bill = self.bill
            bill.calls += 1
            bill.cost += _price(model, usage["prompt_tokens"], usage["completion_tokens"])
            bill.tokens += tokens
            asked = body.get("max_tokens") or 0
            bill.worst_cost = max(bill.worst_cost, _price(model, length, asked))
            bill.worst_tokens = max(bill.worst_tokens, length + asked)
            if key is None:
                bill.unknown.append(json.dumps(body)[:200])
            else:
                bill.requests[key] += 1
                if key in done:
                    bill.twice.append(f"{kind} {key}")
        return {
            "id": f"chatcmpl-{bill.calls}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {**usage, "total_tokens": tokens},
        }

    def latency(self) -> float:
        return self._latency.uniform(0.02, 0.3)

    def entered(self, delta: int) -> None:
        with self._lock:
            self.bill.in_flight += delta
            self.bill.max_in_flight = max(self.bill.max_in_flight, self.bill.in_flight)


def _answer(body: dict[str, Any]) -> tuple[str, Key | None, str]:
    """The reply's text, the attempt the request serves and whether an agent or a judge asks."""
    messages = body.get("messages") or [{}]
    last = str(messages[-1].get("content") or "")
    if "RUBRIC:" in last:
        found = JUDGED.search(last)
        key = (found[1], 0, found[2]) if found else None
        return json.dumps({"score": 1, "reason": "it names its task"}), key, "judge"
    system = str(messages[0].get("content") or "")
    task, variant = re.search(r"task (t\d+)", last), re.search(r"variant ([\w-]+)", system)
    if task is None or variant is None:
        return "?", None, "agent"
    padding = " in full detail" * (3 if variant[1] == "large" else 0)
    return f"answer {task[1]} {variant[1]}{padding}", (task[1], 0, variant[1]), "agent"


def _price(model: str, input_tokens: int, output_tokens: int) -> float:
    per_input, per_output = PRICES[model]
    return (input_tokens * per_input + output_tokens * per_output) / 1_000_000


def _handler(server: BillingServer) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def handle(self) -> None:
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                super().handle()  # a killed client's keep-alive connection: nothing to say

        def do_GET(self) -> None:
            """The probe's models list: every priced model."""
            data = [{"id": name, "object": "model"} for name in PRICES]
            name = self.path.rstrip("/").rpartition("/models/")[2]
            self._send({"id": name, "object": "model"} if name else {"data": data})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.read_json()
            reply = server.arrive(body, length)
            server.entered(1)
            try:
                time.sleep(server.latency())
                self._send(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client was killed
            finally:
                server.entered(-1)

        def _send(self, payload: Any) -> None:
            data = encoded(payload)
            self.send_json_head(200, len(data))
            self.wfile.write(data)

    return Handler


def make(root: Path, base_url: str) -> None:
    """The dataset `ds` in `root`: TASKS tasks, each graded by the judge."""
    ds = root / "ds"
    ds.mkdir(parents=True)
    variants = {
        name: {
            "openai": {"model": model, "provider": "local", "system": f"variant {name}"}
            | {"max_tokens": max_tokens}
        }
        for name, (model, max_tokens) in VARIANTS.items()
    }
    manifest = {
        "name": "ds",
        "version": "1",
        "providers": {
            "local": {"openai": {"base_url": base_url, "api_key_env": KEY_ENV, "model": "small"}}
        },
        "variants": variants,
        "judge": {"model": "judge", "provider": "local", "max_tokens": MAX_TOKENS},
        "pricing": {m: {"input_per_mtok": i, "output_per_mtok": o} for m, (i, o) in PRICES.items()},
    }
    (ds / "agenteval.yaml").write_text(json.dumps(manifest))
    for i in range(TASKS):
        task = {"input": f"task t{i:02}: name this task.", "graders": [{"judge": RUBRIC}]}
        (ds / f"t{i:02}.yaml").write_text(json.dumps(task))
    (root / "pytest.ini").write_text("[pytest]\n")


@dataclass
class Plan:
    """What a repetition does to its first session, and what came of it."""

    kind: str
    at_call: int
    """Killed once the server had received this many requests (0: `delay` after the start)."""
    delay: float
    """Seconds after that (at most 0.1 s), or after the start (at most 3 s)."""
    pids: list[int] = field(default_factory=list)
    """The processes killed (empty: the session ended first)."""
    cap: float | None = None
    """The first session's `--agenteval-max-cost` (kind `cap`)."""
    capped_bill: float = 0.0
    """What the server billed by the end of that session."""


def kill(session: subprocess.Popen[bytes], server: BillingServer, plan: Plan) -> None:
    """Kill `session`'s worker or group as `plan` says, unless the session ends first."""
    start = time.monotonic()
    while session.poll() is None:
        if plan.at_call:
            due = server.bill.calls >= plan.at_call
        else:
            due = time.monotonic() - start >= plan.delay
        found = workers(session.pid)
        if due and (found or plan.kind == "group"):
            time.sleep(plan.delay if plan.at_call else 0)
            found = workers(session.pid)
            if session.poll() is not None:
                return
            if plan.kind == "group":
                plan.pids = [session.pid, *found]
                os.killpg(session.pid, signal.SIGKILL)
            elif found:
                plan.pids = [random.Random(plan.at_call).choice(found)]
                os.kill(plan.pids[0], signal.SIGKILL)
            return
        time.sleep(0.002)


def trial(root: Path, server: BillingServer, kind: str, rng: random.Random) -> dict[str, Any]:
    """One repetition in the empty folder `root`: the run, the kill, the resumes, the checks."""
    make(root, server.base_url)
    server.reset(root)
    calls = 2 * TASKS * len(VARIANTS)
    at_call = rng.randint(0, calls)
    plan = Plan(kind, at_call, rng.uniform(0, 0.1) if at_call else rng.uniform(0, 3.0))
    first = ARGS
    if kind == "cap":  # the full bill is $0.061
        plan.cap = round(rng.uniform(0.01, 0.05), 4)
        first = [*ARGS, "--agenteval-max-cost", str(plan.cap)]
    session = pytest_run(root, first, group=True)
    if kind in ("worker", "group"):
        kill(session, server, plan)
    session.communicate()
    plan.capped_bill = server.bill.cost
    resumes = resume_until_complete(root, ARGS)
    return {"resumes": resumes, **check(root, server.bill, plan)}


def check(root: Path, bill: Bill, plan: Plan) -> dict[str, Any]:
    """The repetition's facts and the invariants it broke."""
    lines = records(root, partial=True)
    written = (run_dir(root) / "records.jsonl").read_text().splitlines()
    final = {(r["task_id"], r["attempt"], r.get("variant")): r["status"] for r in lines}
    expected = {(f"t{i:02}", 0, v) for i in range(TASKS) for v in VARIANTS}
    killed = len(plan.pids)
    flight = (CONCURRENCY + 1) * min(killed, 2)  # the controller runs no attempt
    violations = []
    if len(lines) != len(list(filter(str.strip, written))):
        violations.append("records.jsonl holds a line that is not JSON")
    if set(final) != expected or set(final.values()) != {"pass"}:
        violations.append(f"incomplete: {sorted(k for k in expected if final.get(k) != 'pass')}")
    if replaced(lines):
        violations.append(f"committed records replaced: {replaced(lines)}")
    if bill.twice:
        violations.append(f"paid twice: {bill.twice}")
    if bill.unknown:
        violations.append(f"requests of no attempt: {bill.unknown}")
    if not killed and plan.cap is None and bill.calls != 2 * len(expected):
        violations.append(f"{bill.calls} requests without a kill, not {2 * len(expected)}")
    if plan.cap is not None and plan.capped_bill > plan.cap + 1e-9:
        violations.append(f"the session capped at {plan.cap} was billed {plan.capped_bill}")
    summary = json.loads((run_dir(root) / "summary.json").read_text())
    spend = summary.get("spend")
    if not isinstance(spend, dict):
        violations.append(NO_SPEND)
        spend = {}
    else:
        violations += ledger_violations(spend, bill, flight)
    return {
        "kind": plan.kind if killed or plan.cap is not None else "none",
        "at_call": plan.at_call,
        "cap": plan.cap,
        "capped_bill": plan.capped_bill,
        "bill": {"calls": bill.calls, "cost": bill.cost, "tokens": bill.tokens},
        "spend": spend,
        "recorded": summary.get("totals", {}).get("cost"),
        "slack": {"calls": flight, "cost": flight * bill.worst_cost},
        "max_in_flight": bill.max_in_flight,
        "crash_records": sum(1 for r in lines if r.get("phase") == "crash"),
        "re_run": sum(bill.requests.values()) - 2 * len(expected),
        "violations": violations,
    }


def ledger_violations(spend: dict[str, Any], bill: Bill, flight: int) -> list[str]:
    """The ledger against the bill: never under it, over it by at most `flight` calls held at
    their worst case (see the module's docstring)."""
    found = []
    bounds = {
        "cost": (bill.cost, flight * bill.worst_cost),
        "tokens": (bill.tokens, flight * bill.worst_tokens),
        "calls": (bill.calls, flight),
    }
    for name, (billed, slack) in bounds.items():
        value = spend.get(name)
        rounding = 1e-9 * (1 + billed) if name == "cost" else 0
        if not isinstance(value, int | float):
            found.append(f"spend.{name} is {value!r}")
        elif value < billed - rounding:
            found.append(f"spend.{name} {value} under the bill {billed}")
        elif value > billed + slack + rounding:
            found.append(f"spend.{name} {value} over the bill {billed} by more than {slack}")
    return found


def repetitions(reps: int, seed: int, folder: Path | None = None) -> list[dict[str, Any]]:
    """`reps` repetitions (in temporary folders under `folder`), printed as they end."""
    rng = random.Random(seed)
    server = BillingServer(seed).start()
    results = []
    try:
        for rep in range(reps):
            with tempfile.TemporaryDirectory(prefix="money-trial-", dir=folder) as tmp:
                result = trial(Path(tmp), server, KINDS[rep % len(KINDS)], rng)
            results.append(result)
            print(f"rep {rep + 1:2}: {line(result)}", flush=True)
    finally:
        server.stop()
    return results


def line(result: dict[str, Any]) -> str:
    bill, spend, slack = result["bill"], result["spend"], result["slack"]
    cost = spend.get("cost", math.nan)
    over = cost - bill["cost"]
    said = "ok " if not result["violations"] else "BAD"
    what = {
        "worker": f"a worker killed at call {result['at_call']}",
        "group": f"the group killed at call {result['at_call']}",
        "none": "no kill",
        "cap": f"capped at ${result['cap']}, billed ${result['capped_bill']:.6f} then",
    }[result["kind"]]
    return (
        f"{said} {what}; {result['resumes']} resume(s); bill {bill['calls']} calls "
        f"${bill['cost']:.6f}, ledger {spend.get('calls')} calls ${cost:.6f} "
        f"(+{over:.6f} of at most {slack['cost']:.6f}), recorded ${result['recorded'] or 0:.6f}; "
        f"{result['crash_records']} crash records, "
        f"{result['re_run']} calls re-run, {result['max_in_flight']} at most at the server"
        + "".join(f"\n    {v}" for v in result["violations"])
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    os.environ.setdefault(KEY_ENV, "trial-key")  # the sessions' provider key (any will do)
    results = repetitions(options.reps, options.seed)
    bad = sum(1 for r in results if r["violations"])
    kinds = Counter(r["kind"] for r in results)
    unrecorded = [r["bill"]["cost"] - (r["recorded"] or 0.0) for r in results]
    print(
        f"{options.reps} repetitions ({kinds['worker']} worker kills, {kinds['group']} group "
        f"kills, {kinds['cap']} capped, {kinds['none']} without either): {bad} broke an "
        "invariant; "
        f"{sum(r['crash_records'] for r in results)} crash records, "
        f"{sum(r['re_run'] for r in results)} calls re-run for attempts not committed; "
        f"at most {max(r['resumes'] for r in results)} resume(s); "
        f"the bill above the recorded attempts' totals.cost in "
        f"{sum(gap > 1e-9 for gap in unrecorded)} repetitions, by up to ${max(unrecorded):.6f}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
