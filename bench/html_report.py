"""The HTML report of a big run: time to write it, its size, and time to first paint.

Fills a run store with 10,000 tasks x 5 attempts (outputs of 100-1,500 characters, two-message
transcripts, usage, 12 tags, a quarter failing, some errors), then measures:

1. writing the report: the summary from the index, every full record read back, the page
   rendered and written (what `--agenteval-html` adds at the end of a session);
2. the file's size;
3. loading it in headless Chromium (JavaScript on): `performance.now()` when the page's
   script has drawn the first 200 table rows (the page writes it into `data-rendered-ms`; read
   with `--dump-dom`), and the wall time of `--screenshot` (start, load, script, first paint,
   exit) against a trivial page shot the same way in the same run (the browser's own start-up).
   `--dump-dom`'s own wall time is not a user's wait: it serializes the whole 50 MB data block.

    python bench/html_report.py            # 10,000 x 5, median of 3 browser loads
    python bench/html_report.py --quick    # 500 x 5
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.core.model import AgentResult, Usage, Verdict
from pytest_agenteval.core.records import AttemptRecord, new_record
from pytest_agenteval.reporting.html import attempt_details, write_html
from pytest_agenteval.reporting.reports import write_reports
from pytest_agenteval.reporting.summary import build_summary
from pytest_agenteval.store.runs import Store

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TAGS = [f"tag{i}" for i in range(12)]


def record(rng: random.Random, task: int, attempt: int) -> AttemptRecord:
    roll = rng.random()
    status = "pass" if roll < 0.7 else "fail" if roll < 0.95 else "error"
    output = "lorem ipsum dolor sit amet " * rng.randint(4, 55)
    verdict = Verdict(
        "equals", status == "pass", "output equals expected" if status == "pass" else "no"
    )
    return new_record(
        key=AttemptId(dataset="bench", task_id=f"suite/t{task:05}", variant=None, attempt=attempt),
        digest=f"{task:016x}",
        run_digest=f"{task:016x}",
        agent={"override": None, "manifest": {"bench": "callable:agent:run"}, "version": None},
        tags=[TAGS[task % 12], TAGS[(task // 12) % 12]],
        status=status,  # type: ignore[arg-type]
        verdicts=[] if status == "error" else [verdict],
        result=AgentResult(
            output=output,
            usage=Usage(input_tokens=900, output_tokens=150, cost=0.002),
            transcript=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        ),
        started_at=time.time(),
        duration=rng.lognormvariate(0, 0.6),
        error="RuntimeError: upstream 503" if status == "error" else None,
        error_type="RuntimeError" if status == "error" else None,
        phase="agent" if status == "error" else None,
    )


def fill(path: Path, tasks: int, attempts: int) -> Store:
    rng = random.Random(1)
    store = Store(path)
    store.create_run("bench", [{"name": "bench", "version": "1"}], {"override": None})
    for task in range(tasks):
        for attempt in range(attempts):
            store.commit("bench", record(rng, task, attempt))
    return store


def write_report(store: Store, out: Path) -> tuple[float, float]:
    """Seconds to write the HTML report, and to write summary.json/md and junit.xml (what
    every session writes anyway), each including the summary from the index."""
    times = []
    for html in (True, False):
        start = time.perf_counter()
        run = store.run("bench")
        assert run is not None
        rows, _ = store.index("bench", for_plan=False)
        summary = build_summary(run, rows, ks=None, session_counts={}, status="complete")
        if html:
            write_html(summary, attempt_details(store, "bench"), out)
        else:
            write_reports(summary, out.parent / "reports", "any")
        times.append(time.perf_counter() - start)
    return times[0], times[1]


def rendered_ms(chromium: str, page: Path, profile: Path) -> float | None:
    """performance.now() when the page's script had drawn the table (data-rendered-ms)."""
    argv = [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=600)
    match = re.search(r'data-rendered-ms="([0-9.]+)"', done.stdout)
    return float(match.group(1)) if match else None


def shot(chromium: str, page: Path, profile: Path) -> float:
    """Wall seconds of `chromium --screenshot`: start, load, run the script, paint, exit."""
    out = profile.with_suffix(".png")
    argv = [chromium, *FLAGS, f"--user-data-dir={profile}", f"--screenshot={out}"]
    start = time.perf_counter()
    subprocess.run(
        [*argv, "--window-size=1400,1000", page.as_uri()],
        capture_output=True,
        check=True,
        timeout=600,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tasks, attempts = (500, 5) if args.quick else (10_000, 5)
    chromium = shutil.which("chromium")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        store = fill(folder / "store", tasks, attempts)
        print(f"filled {tasks} tasks x {attempts} attempts in {time.perf_counter() - start:.1f}s")
        page = folder / "report.html"
        writes = [write_report(store, page) for _ in range(args.repeat)]
        size = page.stat().st_size
        html, others = (statistics.median(w[i] for w in writes) for i in (0, 1))
        print(
            f"HTML report written in {html:.2f}s; summary.json/md + junit.xml in {others:.2f}s "
            f"(ratio {html / others:.1f}; median of {args.repeat})"
        )
        print(f"file size {size / 2**20:.1f} MiB ({size / (tasks * attempts):.0f} bytes/attempt)")
        if chromium is None:
            print("chromium not found: no browser timings")
            return
        blank = folder / "blank.html"
        blank.write_text("<!DOCTYPE html><title>blank</title><p>blank</p>")
        results = []
        for i in range(args.repeat):  # alternate the trivial page and the report
            base = shot(chromium, blank, folder / f"profile-b{i}")
            results.append((base, shot(chromium, page, folder / f"profile-r{i}")))
        base = statistics.median(r[0] for r in results)
        wall = statistics.median(r[1] for r in results)
        print(
            f"chromium --screenshot: trivial page {base:.2f}s, report {wall:.2f}s "
            f"(+{wall - base:.2f}s, ratio {wall / base:.2f})"
        )
        drawn = [rendered_ms(chromium, page, folder / f"profile-d{i}") for i in range(2)]
        known = [d for d in drawn if d is not None]
        if known:
            print(f"table drawn at performance.now() = {statistics.median(known):.0f} ms")
        print(json.dumps({"tasks": tasks, "attempts": attempts, "bytes": size}))


if __name__ == "__main__":
    main()
