"""What the workspace-template guard costs a pytest run in a project without datasets.

The guard is asked about every path pytest walks (plain `pytest` too); where no dataset is it
looks for a manifest once per folder. Writes a tree of FOLDERS folders with three test files
each (no `agenteval.yaml`), then times the guard's answers for every path, best of 5, against
`pytest --co -q` of the same tree. Then the first answer inside a dataset of 10,000 YAML tasks
that name no workspace (its task files are only searched for the word, not parsed).

    python bench/template_guard.py            # 400 folders
    python bench/template_guard.py 2000
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_agenteval.sources.discovery import TemplateFolders


def main() -> None:
    folders = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for d in range(folders):
            (root / f"pkg{d}").mkdir()
            for f in range(3):
                (root / f"pkg{d}" / f"test_m{d}_{f}.py").write_text("def test_a():\n    pass\n")
        paths = [Path(p) / n for p, ds, fs in os.walk(root) for n in ds + fs]
        best = min(_guard_time(paths) for _ in range(5))
        start = time.perf_counter()
        args = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
        subprocess.run(args, cwd=root, capture_output=True, check=False)
        collect = time.perf_counter() - start
    print(f"{len(paths)} paths: guard {best * 1e3:.1f} ms ({best / len(paths) * 1e6:.1f} us/path)")
    print(f"pytest --co -q of the same tree: {collect:.2f} s ({best / collect:.2%} of it)")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        (root / "agenteval.yaml").write_text('name: big\nversion: "1"\nagent: agent:run\n')
        for f in range(100):
            folder = root / f"part{f % 10}"
            folder.mkdir(exist_ok=True)
            tasks = [{"id": f"t{f}_{i}", "input": f"q {i}", "expected": str(i)} for i in range(100)]
            (folder / f"f{f}.yaml").write_text(json.dumps({"tasks": tasks}))
        start = time.perf_counter()
        TemplateFolders().is_template(root / "part0")
        print(f"first folder inside a 10,000-task dataset: {time.perf_counter() - start:.2f} s")


def _guard_time(paths: list[Path]) -> float:
    guard = TemplateFolders()
    start = time.perf_counter()
    for path in paths:
        guard.is_template(path)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
