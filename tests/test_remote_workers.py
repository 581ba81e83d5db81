"""xdist workers that share neither the controller's working directory nor its cache (`--tx
popen//chdir=...`, as remote workers) produce the same records and summary: records travel
only on reports, and the workers' own copy of the dataset is what runs."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import DatasetMaker, comparable, stored, task


@pytest.mark.slow
def test_workers_in_another_folder_give_the_same_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Two workers chdir'ed into a copy of the project: the controller's store gets every
    record, equal to a one-process run's; the workers' cache holds no run; the agent ran from
    the workers' copy of the dataset only."""
    dataset(
        {
            "a.yaml": task("ok"),
            "b.yaml": task(metadata={"answers": ["ok", "no"]}),
            "c.yaml": task(metadata={"raise": "boom"}),
        }
    )
    pytester.runpytest_subprocess("--agenteval", "ds", "--attempts", "2", "-p", "no:xdist")
    local = json.loads(
        next(pytester.path.glob(".pytest_cache/agenteval/runs/*/summary.json")).read_text()
    )
    expected = stored(pytester.path)
    shutil.rmtree(pytester.path / ".pytest_cache")
    (pytester.path / "ds/calls.log").unlink()
    remote = pytester.path / "elsewhere"
    remote.mkdir()
    shutil.copytree(pytester.path / "ds", remote / "ds")
    result = pytester.runpytest_subprocess(
        "--agenteval=ds",  # one token: xdist rewrites path arguments for rsync roots only
        "--attempts",
        "2",
        "--tx",
        f"2*popen//chdir={remote}",
        "--dist",
        "load",
    )
    result.assert_outcomes(passed=3, failed=1, errors=2)
    assert stored(pytester.path) == expected
    summary = json.loads(
        next(pytester.path.glob(".pytest_cache/agenteval/runs/*/summary.json")).read_text()
    )
    assert comparable(summary) == comparable(local)
    assert not (pytester.path / "ds/calls.log").exists()
    assert len((remote / "ds/calls.log").read_text().splitlines()) == 6
    assert not list(remote.glob(".pytest_cache/agenteval/runs/*"))


UNSEEN = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    shipped = getattr(config, "workerinput", {}).get("agenteval")
    if shipped and shipped.get("stops"):
        shipped["stops"]["run_dir"] = "/proc/agenteval-run-on-another-machine"
"""


@pytest.mark.slow
def test_a_worker_that_cannot_see_the_run_folder_still_runs(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A worker to which the controller's run folder does not exist (another machine) runs its
    attempts under agent limits and a deadline instead of failing to reach the folder."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.makeconftest(UNSEEN)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "2", "-n", "2",
        "--agenteval-max-in-flight", "1", "--agenteval-deadline", "1h",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    assert len(stored(pytester.path)) == 4
