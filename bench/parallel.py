"""Parallel runs: 200 attempts of an agent that sleeps 50 ms (an API call stand-in).

Runs the suite with -n 0, 2, 8 and 16 and prints the wall time of each against the ideal
(attempts x 50 ms / workers), and the peak memory of the whole process tree (controller and
workers, sampled from /proc); beside it, plain pytest running 200 tests that sleep 50 ms.

    python bench/parallel.py
    python bench/parallel.py --quick        # -n 0 and 2 only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ATTEMPTS = 200
SLEEP = 0.05


def make_dataset(root: Path) -> None:
    (root / "ds").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    manifest = {"name": "par", "version": "1", "agent": "agent:run", "defaults": {"attempts": 4}}
    (root / "ds/agenteval.yaml").write_text(json.dumps(manifest))
    (root / "ds/agent.py").write_text(
        f"import time\n\ndef run(task):\n    time.sleep({SLEEP})\n    return 'ok'\n"
    )
    for i in range(ATTEMPTS // 4):
        (root / f"ds/t{i:03}.yaml").write_text("input: q\nexpected: ok\n")
    (root / "plain").mkdir()
    (root / "plain/test_sleep.py").write_text(
        "import time\n\nimport pytest\n\n\n"
        f"@pytest.mark.parametrize('i', range({ATTEMPTS}))\n"
        f"def test_sleep(i):\n    time.sleep({SLEEP})\n"
    )


def tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        ppid = int(fields["PPid"])
        children.setdefault(ppid, []).append(int(entry.name))
        rss[int(entry.name)] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo.extend(children.get(current, []))
    return total


def run(root: Path, workers: int, target: list[str]) -> tuple[float, int]:
    shutil.rmtree(root / ".pytest_cache", ignore_errors=True)
    args = [sys.executable, "-m", "pytest", "-q", *target, "-n", str(workers)]
    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.DEVNULL)
    peak = 0

    def sample() -> None:
        nonlocal peak
        while proc.poll() is None:
            peak = max(peak, tree_rss_kib(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    if proc.wait() != 0:
        raise SystemExit(f"-n {workers} failed")
    elapsed = time.perf_counter() - start
    sampler.join()
    return elapsed, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agenteval-par-"))
    try:
        make_dataset(root)
        print(f"{ATTEMPTS} attempts x {SLEEP * 1000:.0f} ms, {os.cpu_count()} cores")
        print(
            "  -n  ideal s | agenteval: wall s  /ideal  peak MiB | plain pytest: wall s  peak MiB"
        )
        for workers in [0, 2] if args.quick else [0, 2, 8, 16]:
            ideal = ATTEMPTS * SLEEP / max(workers, 1)
            ours, ours_peak = run(root, workers, ["--agenteval", "ds"])
            plain, plain_peak = run(root, workers, ["plain"])
            ours_mib, plain_mib = ours_peak / 1024, plain_peak / 1024
            print(
                f"{workers:>4} {ideal:8.2f} | {ours:17.2f} {ours / ideal:7.2f} {ours_mib:9.0f}"
                f" | {plain:19.2f} {plain_mib:9.0f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
