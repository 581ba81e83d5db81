"""Shards: a deterministic split by task that covers every attempt once, stays put when tasks are
added, is its own run in the store, and composes with -k, -n and --resume-suite."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import DatasetMaker, ids_in_shards, run_ids, summary_of, task
from pytest_agenteval.cli import main
from pytest_agenteval.core.shards import Shard, parse_shard, resolve_shard, shard_of

TASK_IDS = st.sets(st.text(min_size=1, max_size=12), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(ids=TASK_IDS, total=st.integers(1, 7))
def test_shards_cover_every_task_exactly_once(ids: set[str], total: int) -> None:
    """Every task lands in exactly one of the N shards."""
    shards = [Shard(i, total) for i in range(1, total + 1)]
    for task_id in ids:
        assert sum(shard.holds("ds", task_id) for shard in shards) == 1


@settings(max_examples=60, deadline=None)
@given(ids=TASK_IDS, added=st.text(min_size=1, max_size=12), total=st.integers(2, 7))
def test_adding_a_task_moves_no_other_task(ids: set[str], added: str, total: int) -> None:
    """A task's shard depends on its own key only, so a new task reshuffles nothing."""
    before = {t: shard_of("ds", t, total) for t in ids}
    after = {t: shard_of("ds", t, total) for t in ids | {added}}
    assert all(after[t] == shard for t, shard in before.items())


def test_shards_are_balanced_for_a_large_suite() -> None:
    """2,000 tasks into 4 shards: no shard is more than 10% above the mean."""
    counts = [0] * 4
    for i in range(2000):
        counts[shard_of("ds", f"task-{i}", 4) - 1] += 1
    assert max(counts) <= 1.1 * 500, counts


@pytest.mark.parametrize("bad", ["0/4", "5/4", "2/0", "2", "a/b", "-1/3"])
def test_bad_shards_are_refused(bad: str) -> None:
    """I/N outside 1 <= I <= N, or not I/N at all, is a usage error quoting the value."""
    with pytest.raises(argparse.ArgumentTypeError, match="is not a shard"):
        parse_shard(bad)


def test_auto_reads_the_ci_node_variables() -> None:
    """`auto` takes GitLab's 1-based CI_NODE_INDEX/CI_NODE_TOTAL; unset, it runs everything."""
    env = {"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "4"}
    assert resolve_shard(parse_shard("auto"), env) == Shard(2, 4)
    assert resolve_shard("auto", {}) is None
    with pytest.raises(argparse.ArgumentTypeError, match="CI_NODE_INDEX=0"):
        resolve_shard("auto", {"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "4"})


@pytest.mark.parametrize(
    ("env", "shard"),
    [
        ({"CIRCLE_NODE_INDEX": "0", "CIRCLE_NODE_TOTAL": "3"}, Shard(1, 3)),
        ({"CIRCLE_NODE_INDEX": "2", "CIRCLE_NODE_TOTAL": "3"}, Shard(3, 3)),
        ({"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "4"}, Shard(2, 4)),
        ({"JOB_COMPLETION_INDEX": "4", "JOB_COMPLETIONS": "5"}, Shard(5, 5)),
        # GitLab's variables win over others set beside them.
        ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "2", "CIRCLE_NODE_INDEX": "1"}, Shard(1, 2)),
    ],
)
def test_auto_reads_circleci_buildkite_and_kubernetes(env: dict[str, str], shard: Shard) -> None:
    """`auto` also reads CircleCI's, Buildkite's and a Kubernetes Indexed Job's 0-based index."""
    assert resolve_shard("auto", env) == shard


def test_auto_says_which_variable_is_missing_or_out_of_range() -> None:
    """A Kubernetes index without JOB_COMPLETIONS, or a 0-based index past the total, is named."""
    with pytest.raises(argparse.ArgumentTypeError, match=r"JOB_COMPLETIONS=\(unset\)"):
        resolve_shard("auto", {"JOB_COMPLETION_INDEX": "1"})
    with pytest.raises(argparse.ArgumentTypeError, match="CIRCLE_NODE_INDEX counts from 0"):
        resolve_shard("auto", {"CIRCLE_NODE_INDEX": "3", "CIRCLE_NODE_TOTAL": "3"})


def test_ini_auto_takes_the_shard_from_the_environment(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ini `agenteval_shard = auto` reads CI_NODE_INDEX/CI_NODE_TOTAL; values out of range are
    a usage error naming the variables."""
    dataset({"a.yaml": task("ok")})
    pytester.makeini("[pytest]\nagenteval_shard = auto\n")
    monkeypatch.setenv("CI_NODE_INDEX", "2")
    monkeypatch.setenv("CI_NODE_TOTAL", "3")
    result = pytester.runpytest("--agenteval", "ds", "-p", "no:xdist")
    result.stdout.fnmatch_lines(["agenteval: run * (new) · shard 2/3 · store *"])
    monkeypatch.setenv("CI_NODE_INDEX", "4")
    bad = pytester.runpytest("--agenteval", "ds", "-p", "no:xdist")
    bad.stderr.fnmatch_lines(
        ["*--agenteval-shard: CI_NODE_INDEX=4 CI_NODE_TOTAL=3 is not a shard*"]
    )


SHARDED = ids_in_shards(3, 2)
"""Six tasks, two in each of 3 shards; the first of each shard fails its second attempt."""
TASKS = {
    f"{t}.yaml": task(metadata={"answers": ["ok", "no"]}) if i == 0 else task("ok")
    for ids in SHARDED.values()
    for i, t in enumerate(ids)
}


def run_json(root: Path, run_id: str) -> dict[str, object]:
    return cast(
        dict[str, object],
        json.loads((root / f".pytest_cache/agenteval/runs/{run_id}/run.json").read_text()),
    )


def test_a_shard_deselects_other_tasks_and_is_its_own_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Shard 2/3 runs only its tasks' attempts, deselects the rest, stores `shard` in run.json
    and is a whole run of its shard (not narrowed); load errors are reported by shard 1 only."""
    dataset({**TASKS, "broken.yaml": "input: ["})
    args = ["--agenteval", "ds", "--attempts", "2", "-p", "no:xdist"]
    result = pytester.runpytest(*args, "--agenteval-shard", "2/3")
    result.assert_outcomes(passed=3, failed=1, deselected=9)
    run = run_json(pytester.path, summary_of(pytester)["run_id"])
    assert run["shard"] == "2/3" and not run.get("narrowed") and run["planned"] == 4
    ran = {line.split()[0] for line in dataset.calls()}
    assert ran == set(SHARDED[2])
    first = pytester.runpytest(*args, "--agenteval-shard", "1/3")
    first.assert_outcomes(passed=3, failed=1, errors=1, deselected=8)


def test_shard_sessions_select_every_attempt_exactly_once(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """The attempts that 3 shard sessions select (`--co`) are those of the unsharded session,
    each selected by one shard, all attempts of a task by the same one."""
    dataset({f"t{i}.yaml": task("ok") for i in range(12)})
    args = ["--agenteval", "ds", "--attempts", "3", "--co", "-q"]

    def selected(*extra: str) -> list[str]:
        lines = pytester.runpytest(*args, *extra).outlines
        return [line for line in lines if "::" in line]

    whole = selected()
    shards = [selected("--agenteval-shard", f"{i}/3") for i in (1, 2, 3)]
    assert sorted(n for part in shards for n in part) == sorted(whole) and len(whole) == 36
    for part in shards:
        tasks = {nodeid.split("::")[1].split("[")[0] for nodeid in part}
        assert len(part) == 3 * len(tasks)


def test_an_empty_shard_succeeds_and_is_kept(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A shard that holds no task exits 0 and keeps its (empty) run for merge; a shard whose
    tasks `-m` all leaves out still exits 5 (nothing selected)."""
    dataset({f"{SHARDED[1][0]}.yaml": task("ok", tags=["smoke"])})
    args = ["--agenteval", "ds", "-p", "no:xdist"]
    assert pytester.runpytest(*args, "--agenteval-shard", "2/3").ret == 0
    assert run_json(pytester.path, summary_of(pytester)["run_id"])["shard"] == "2/3"
    assert pytester.runpytest(*args, "--agenteval-shard", "1/3", "-m", "typo").ret == 5


def test_resuming_a_shard_continues_that_shards_run(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Shards 1/3 and 2/3 share a cache; --resume-suite with 2/3 continues shard 2's run (no
    agent call), and a run id of another shard is refused by name."""
    dataset(TASKS)
    args = ["--agenteval", "ds", "--attempts", "2", "-p", "no:xdist"]
    pytester.runpytest(*args, "--agenteval-shard", "2/3")
    second = summary_of(pytester)["run_id"]
    pytester.runpytest(*args, "--agenteval-shard", "1/3")
    calls = len(dataset.calls())
    result = pytester.runpytest(*args, "--agenteval-shard", "2/3", "--resume-suite")
    result.assert_outcomes(passed=3, failed=1, deselected=8)
    result.stdout.fnmatch_lines([f"agenteval: run {second} (resuming) · shard 2/3 · store *"])
    assert len(dataset.calls()) == calls
    wrong = pytester.runpytest(
        *args, "--agenteval-shard", "3/3", "--resume-suite", "--agenteval-run-id", second
    )
    wrong.stderr.fnmatch_lines([f"*run {second} is of shard 2/3, and this session runs shard 3/3*"])
    assert len(run_ids(pytester.path)) == 2


def test_a_repaired_shard_run_keeps_its_shard(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A shard run whose run.json is lost is rebuilt by `agenteval repair` with its shard (from
    summary.json), so its shard's --resume-suite still continues it."""
    dataset(TASKS)
    args = ["--agenteval", "ds", "--attempts", "2", "-p", "no:xdist", "--agenteval-shard", "2/3"]
    pytester.runpytest(*args)
    run_id = summary_of(pytester)["run_id"]
    assert summary_of(pytester)["shard"] == "2/3"
    (pytester.path / f".pytest_cache/agenteval/runs/{run_id}/run.json").unlink()
    cache = str(pytester.path / ".pytest_cache")
    assert main(["repair", run_id, "--cache-dir", cache]) == 0
    assert run_json(pytester.path, run_id)["shard"] == "2/3"
    result = pytester.runpytest(*args, "--resume-suite")
    result.stdout.fnmatch_lines([f"agenteval: run {run_id} (resuming) · shard 2/3*"])


@pytest.mark.slow
def test_a_shard_under_xdist_with_k(pytester: pytest.Pytester, dataset: DatasetMaker) -> None:
    """`-n 2` with a shard and `-k` runs the same attempts as one process would: deselection
    happens on the workers, and the controller's run covers the shard, narrowed by -k."""
    dataset(TASKS)
    keep = SHARDED[3][0]
    args = ["--agenteval", "ds", "--attempts", "2", "--agenteval-shard", "3/3"]
    result = pytester.runpytest_subprocess(*args, "-n", "2", "-k", keep)
    result.assert_outcomes(passed=1, failed=1)
    summary = summary_of(pytester)
    assert [t["task_id"] for t in summary["tasks"]] == [keep]
    run = run_json(pytester.path, summary["run_id"])
    assert run["shard"] == "3/3" and run["narrowed"] and run["planned"] == 2
