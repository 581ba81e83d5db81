"""The reports of a stored run stay byte-for-byte what they were before the typed summary."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_agenteval.cli import main

GOLDEN = Path(__file__).parent / "golden" / "reports"
"""`agenteval/runs/*`: the example suite's run (ex1), a narrowed run of it with a load error
and a regression block (ex2), and the v1 golden run; `expected/*`: their reports as written
before the summary became a model, plus the errors counted by class (`counts.error_classes`,
JUnit's `errors_<class>`), added since."""


@pytest.mark.parametrize("run_id", ["ex1", "ex2", "golden1"])
def test_reports_are_byte_identical(tmp_path: Path, run_id: str) -> None:
    """`agenteval report` writes summary.json, summary.md and junit.xml exactly as before."""
    shutil.copytree(GOLDEN / "agenteval", tmp_path / "agenteval")
    out = tmp_path / "out"
    assert main(["report", run_id, "--cache-dir", str(tmp_path), "--out", str(out)]) == 0
    for name in ("summary.json", "summary.md", "junit.xml"):
        expected = (GOLDEN / "expected" / run_id / name).read_text(encoding="utf-8")
        assert (out / name).read_text(encoding="utf-8") == expected, name
