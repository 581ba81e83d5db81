"""Artifacts: the files an attempt's agent created or changed, kept with the attempt in the
run store (up to `artifacts: {max_bytes}`), shown by `agenteval show`, the HTML report and
`agenteval export --artifacts`, and never seen by a rerun. Against the real Docker daemon
(the `image` fixture of test_sandbox.py skips without one, except under `CI=true`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import WORKERS, DatasetMaker, latest_record, latest_run
from test_sandbox import busybox_image

AGENT = [
    "sh",
    "-c",
    "cd {workspace} && echo -n small > small.txt && head -c 500 /dev/zero > big.bin"
    " && echo -n changed > seed.txt && rm gone.txt && mkdir -p out && echo -n '<b>' > out/page.html"
    ' && echo -n "$0" > attempt.txt',
    "{attempt}",
]
"""Adds small.txt (5 bytes), big.bin (500), out/page.html (3), attempt.txt (1); changes
seed.txt (7); deletes gone.txt."""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The busybox test image of test_sandbox.py."""
    return busybox_image(tmp_path_factory)


def _boxed_dataset(dataset: DatasetMaker, image: str, **defaults: object) -> Path:
    root = dataset(
        {"a.yaml": {"input": "x", "expected": "x", "workspace": "ws"}},
        manifest={
            "agent": {"command": AGENT},
            "defaults": {"sandbox": {"docker": {"image": image}}, **defaults},
        },
    )
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("seed")
    (root / "ws/gone.txt").write_text("to delete")
    return root


def _artifacts(root: Path, attempt: int = 0) -> dict[str, bytes]:
    """The kept files of ds/a's attempt in the newest run, by path."""
    run = root / ".pytest_cache/agenteval/runs" / latest_run(root)
    folder = run / "artifacts" / "ds" / f"a[attempt-{attempt}]"
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("workers", WORKERS)
def test_changed_files_are_kept_up_to_the_cap_and_listed(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, workers: list[str]
) -> None:
    """A sandboxed attempt's changed files are listed in its record (path, change, size,
    kept) and those that fit in `max_bytes` are kept in the run store; one past the cap is
    listed, not kept; under xdist the worker ships them to the controller, which writes them."""
    _boxed_dataset(dataset, image, artifacts={"max_bytes": 100})
    root = pytester.path
    result = pytester.runpytest_subprocess("--agenteval", "ds", *workers)
    result.assert_outcomes(failed=1)
    listed = latest_record(root, "a", 0)["changed_files"]
    assert listed == [
        {"path": "attempt.txt", "change": "added", "size": 1, "kept": True},
        {"path": "big.bin", "change": "added", "size": 500, "kept": False},
        {"path": "gone.txt", "change": "deleted", "size": 0, "kept": False},
        {"path": "out/page.html", "change": "added", "size": 3, "kept": True},
        {"path": "seed.txt", "change": "modified", "size": 7, "kept": True},
        {"path": "small.txt", "change": "added", "size": 5, "kept": True},
    ]
    assert _artifacts(root) == {
        "attempt.txt": b"0",
        "out/page.html": b"<b>",
        "seed.txt": b"changed",
        "small.txt": b"small",
    }
