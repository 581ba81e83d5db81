"""Under xdist, who pays: CPU per attempt of the controller and of the workers, beside plain pytest.

`bench/overhead.py --xdist --cpu` gives one number per side (the whole process tree); this
splits it. A small probe plugin, loaded on both sides, writes each pytest process's own CPU
time (user + system) at its end; slopes between two sizes cancel start-up costs. With
`--before PYTHON` a second interpreter (another checkout's venv) is measured in the same
rounds, for a before/after that shares the machine's load.

    python bench/xdist_split.py -n 4                      # 1,000 / 10,000 tasks x 3, 2 rounds
    python bench/xdist_split.py -n 2 --before /tmp/old/.venv/bin/python
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import ATTEMPTS, make_workdir

PROBE = """import os, resource


def pytest_unconfigure(config):
    used = resource.getrusage(resource.RUSAGE_SELF)
    role = "worker" if hasattr(config, "workerinput") else "controller"
    with open(os.environ["XDIST_SPLIT_OUT"], "a") as out:
        out.write(f"{role} {used.ru_utime + used.ru_stime}\\n")
"""


def measure(work: Path, python: str, args: list[str], workers: str, probe: Path) -> list[float]:
    """[controller, workers] CPU seconds of one session."""
    out = probe / "cpu.txt"
    out.unlink(missing_ok=True)
    shutil.rmtree(work / ".pytest_cache/agenteval/runs", ignore_errors=True)
    env = {
        **os.environ,
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": str(probe),
        "XDIST_SPLIT_OUT": str(out),
    }
    command = [python, "-m", "pytest", "-q", "-p", "xdist_probe", "-p", "xdist", "-n", workers]
    subprocess.run([*command, *args], cwd=work, env=env, stdout=subprocess.DEVNULL, check=True)
    split = [0.0, 0.0]
    for line in out.read_text().splitlines():
        role, seconds = line.split()
        split[1 if role == "worker" else 0] += float(seconds)
    return split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", default="2", help="xdist workers (default 2)")
    parser.add_argument("--sizes", default="1000,10000", help="two task counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", help="another Python whose pytest-agenteval to compare")
    args = parser.parse_args()
    small, big = (int(n) for n in args.sizes.split(","))
    sides = {"plain": (sys.executable, ["plain"]), "ours": (sys.executable, ["--agenteval", "ds"])}
    if args.before:
        sides["before"] = (args.before, ["--agenteval", "ds"])
    root = Path(tempfile.mkdtemp(prefix="agenteval-split-"))
    try:
        probe = root / "probe"
        probe.mkdir()
        (probe / "xdist_probe.py").write_text(PROBE)
        works = {n: make_workdir(root, n) for n in (small, big)}
        samples: dict[tuple[str, int], list[list[float]]] = {}
        for _ in range(args.rounds):
            for n, work in works.items():
                for side, (python, side_args) in sides.items():
                    plugin = [] if side == "plain" else ["-p", "agenteval"]
                    split = measure(work, python, [*plugin, *side_args], args.n, probe)
                    samples.setdefault((side, n), []).append(split)
        items = (big - small) * ATTEMPTS
        print(f"-n {args.n}: CPU µs per attempt, slope {small * ATTEMPTS:,} -> {big * ATTEMPTS:,}")
        print(f"median of {args.rounds} rounds")
        print(f"{'side':8} {'controller':>10} {'workers':>8} {'total':>7} {'ratio':>8}")
        plain_total = None
        for side in sides:
            slopes = [
                (
                    statistics.median(s[part] for s in samples[(side, big)])
                    - statistics.median(s[part] for s in samples[(side, small)])
                )
                / items
                * 1e6
                for part in (0, 1)
            ]
            total = sum(slopes)
            plain_total = plain_total or total
            print(
                f"{side:8} {slopes[0]:10.0f} {slopes[1]:8.0f} {total:7.0f} "
                f"{total / plain_total:8.3f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
