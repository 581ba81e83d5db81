"""What store damage costs to read (issue 23): a sound run against the damage path.

Fills a run with N records (as `bench/resume_plan.py` does: 1 KB outputs), then times reading
its index for a plan and for metrics while sound, and after an index cut mid-file (the reader
re-indexes records.jsonl), and what a resume then re-runs: nothing whose record is intact.

    python bench/store_damage.py              # 30,000 records
    python bench/store_damage.py --records 5000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from resume_plan import fill

from pytest_agenteval.store.runs import Store


def best_of(repeats: int, work: Callable[[], object]) -> float:
    """The least CPU time of `repeats` runs (wall time swings with the machine's load)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        store, _ = fill(root, args.records)
        store.close()

        def read(for_plan: bool) -> Callable[[], object]:
            return lambda: Store(root).index("bench", for_plan=for_plan)

        sound = {plan: best_of(args.repeats, read(plan)) for plan in (True, False)}
        index = root / "runs/bench/index.jsonl"
        data = index.read_bytes()
        index.write_bytes(data[: len(data) // 2 + 40])
        damaged = {plan: best_of(args.repeats, read(plan)) for plan in (True, False)}
        rows, _ = Store(root).index("bench")
        size = (root / "runs/bench/records.jsonl").stat().st_size >> 20
        print(f"{args.records} records, {size} MiB")
        for plan, words in ((True, "for a plan"), (False, "for metrics")):
            print(
                f"read {words}: sound {sound[plan]:.3f} s CPU, index cut mid-file "
                f"{damaged[plan]:.3f} s CPU (re-indexed)"
            )
        print(f"attempts kept after the cut: {len(rows)} of {args.records}")


if __name__ == "__main__":
    main()
