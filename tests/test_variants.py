"""Variants: several agents on the same tasks in one run, each attempt keyed by its variant."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from chat_server import ChatServer
from helpers import (
    WORKERS,
    DatasetMaker,
    comparable,
    ids_in_shards,
    latest_run,
    run_ids,
    run_layout,
    summary_of,
    task,
)
from pytest_agenteval.cli import main
from pytest_agenteval.store.progress import progress_lines

# Each variant's agent appends "<task> <attempt>" to its own log, so tests count its calls.
AGENTS = """
import pathlib

HERE = pathlib.Path(__file__).parent


def _called(name, task):
    with (HERE / f"{name}.log").open("a") as log:
        log.write(f"{task.id} {task.attempt}\\n")


def base(task):
    _called("base", task)
    return "ok"


def cand(task):
    _called("cand", task)
    return "ok" if task.id == "t1" else "no"


def crashy(task):
    flag = HERE / "crashed.flag"
    if task.id == "t1" and not flag.exists():
        flag.touch()
        import os
        os._exit(3)
    _called("crashy", task)
    return "ok"
"""

COMMAND = (
    "import json, sys\n"
    "task = json.load(sys.stdin)\n"
    "with open(sys.argv[1], 'a') as log:\n"
    "    log.write(f\"{task['id']} {task['attempt']}\\n\")\n"
    "print('ok')\n"
)
"""A command agent (a real subprocess): logs its call to the file its argument names."""

KEY_ENV = "AGENTEVAL_TEST_KEY"
TASKS = {"t1.yaml": task("ok"), "t2.yaml": task("ok")}


def command_agent(root: Path, log: str = "cmd", version: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "agent": {"command": [sys.executable, "-c", COMMAND, str(root / "ds" / f"{log}.log")]}
    }
    return spec | ({"agent_version": version} if version else {})


def write(
    dataset: DatasetMaker, variants: dict[str, Any], tasks: dict[str, Any] | None = None
) -> Path:
    """A dataset whose manifest compares `variants` (and has no `agent:`)."""
    root = dataset(tasks or TASKS, manifest={"agent": None, "variants": variants})
    (root / "agents.py").write_text(AGENTS)
    return root


def calls(root: Path, name: str) -> list[str]:
    log = root / f"{name}.log"
    return sorted(log.read_text().splitlines()) if log.exists() else []


def records(
    root: Path, run_id: str | None = None, cache: str = ".pytest_cache"
) -> list[tuple[str, int, str | None, str]]:
    """(task, attempt, variant, status) of every record of the run's index, sorted."""
    from pytest_agenteval.store.runs import Store

    store = Store(root / cache / "agenteval")
    try:
        if run_id is None:
            (run_id,) = (p.name for p in (root / cache / "agenteval/runs").iterdir())
        rows, _ = store.index(run_id)
    finally:
        store.close()
    return sorted((r.task_id, r.attempt, r.variant, r.status) for r in rows)


def run_file(root: Path, name: str) -> dict[str, Any]:
    """A file of the newest run's folder (run.json, progress.json), as JSON."""
    path = root / ".pytest_cache/agenteval/runs" / latest_run(root) / name
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def run_json(root: Path) -> dict[str, Any]:
    return run_file(root, "run.json")


def three(pytester: pytest.Pytester) -> dict[str, Any]:
    return {"base": "agents:base", "cand": "agents:cand", "cmd": command_agent(pytester.path)}


@pytest.mark.parametrize(
    "workers", [*WORKERS, pytest.param(["--agenteval-concurrency", "8"], id="concurrency")]
)
def test_each_variant_runs_every_task_with_its_own_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """Three variants of different agent kinds (two callables, a command): one item per task x
    attempt x variant, in task, attempt, variant order, each attempt run by its variant's agent
    and recorded with its variant: the same records and item order with xdist workers or
    attempts in flight as in one process."""
    root = write(dataset, three(pytester))
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "2", "-v", "-p", "no:randomly", *workers
    )
    assert result.ret == 1  # cand answers t2 wrong
    if "-n" not in workers:
        result.stdout.fnmatch_lines(
            [
                "*t1[[]base-attempt-0[]] PASSED*",
                "*t1[[]cand-attempt-0[]] PASSED*",
                "*t1[[]cmd-attempt-0[]] PASSED*",
                "*t1[[]base-attempt-1[]] PASSED*",
                "*t1[[]cand-attempt-1[]] PASSED*",
                "*t1[[]cmd-attempt-1[]] PASSED*",
                "*t2[[]base-attempt-0[]] PASSED*",
                "*t2[[]cand-attempt-0[]] FAILED*",
                "t2 [[]cand attempt 0[]] failed: *",  # the failure names the variant
            ]
        )
    expected = sorted(
        (t, a, v, "fail" if (t, v) == ("t2", "cand") else "pass")
        for t in ("t1", "t2")
        for a in (0, 1)
        for v in ("base", "cand", "cmd")
    )
    assert records(pytester.path) == expected
    every = ["t1 0", "t1 1", "t2 0", "t2 1"]
    assert [calls(root, v) for v in ("base", "cand", "cmd")] == [every] * 3
    progress = run_file(pytester.path, "progress.json")
    counts = {"planned": 4, "done": 4, "fail": 0, "error": 0, "skipped": 0, "reused": 0}
    assert progress["variants"] == {
        "base": counts | {"pass": 4},
        "cand": counts | {"pass": 2, "fail": 2},
        "cmd": counts | {"pass": 4},
    }
    assert progress_lines(progress)[-3:] == [
        "  variant base: 4/4 done · 4 passed, 0 failed, 0 errors, 0 skipped",
        "  variant cand: 4/4 done · 2 passed, 2 failed, 0 errors, 0 skipped",
        "  variant cmd: 4/4 done · 4 passed, 0 failed, 0 errors, 0 skipped",
    ]
    meta = run_json(pytester.path)
    assert (meta["variants"], meta["reference"]) == (["base", "cand", "cmd"], "base")
    assert meta["agent"]["variants"] == {
        "ds": {
            "base": "callable:agents:base",
            "cand": "callable:agents:cand",
            "cmd": f"command:{sys.executable} -c {COMMAND} {root / 'cmd.log'}",
        }
    }


def test_dataset_without_variants_keeps_its_run_json(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A run without `variants:` keeps its item ids, and its run.json and fingerprint name
    no variant."""
    dataset(TASKS)
    result = pytester.runpytest("--agenteval", "ds", "-v")
    result.stdout.fnmatch_lines(["*t1[[]attempt-0[]] PASSED*"])
    meta = run_json(pytester.path)
    assert "variants" not in meta and "reference" not in meta
    assert "variants" not in meta["agent"]
    assert "variants" not in run_file(pytester.path, "progress.json")


def test_task_with_its_own_agent_is_not_compared(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A task naming its own agent in a dataset with variants runs once per attempt with that
    agent, its item id and record without a variant."""
    own = task(agent="agents:cand")
    root = write(dataset, {"base": "agents:base", "b": "agents:base"}, {"t1.yaml": own})
    result = pytester.runpytest("--agenteval", "ds", "-v", "--attempts", "2")
    result.stdout.fnmatch_lines(["*t1[[]attempt-0[]] PASSED*", "*t1[[]attempt-1[]] PASSED*"])
    result.assert_outcomes(passed=2)
    assert records(pytester.path) == [("t1", 0, None, "pass"), ("t1", 1, None, "pass")]
    assert (calls(root, "cand"), calls(root, "base")) == (["t1 0", "t1 1"], [])


def test_agent_and_variants_in_one_manifest_is_a_located_error(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A manifest with both `agent:` and `variants:` is refused at its `agent:` line, saying
    to put the agent in `variants:`; nothing runs."""
    root = dataset(TASKS)
    (root / "agenteval.yaml").write_text(
        "name: ds\nversion: '1'\nagent: agent:run\nvariants:\n  a: agent:run\n"
    )
    result = pytester.runpytest("--agenteval", "ds")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*agenteval.yaml:3: at agent: `agent:` and `variants:` both set*", "*put the agent in*"]
    )
    assert run_ids(pytester.path) == []


def test_a_variant_name_items_cannot_carry_is_a_located_error(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A variant named with a space is refused at its line, saying which characters a name
    may use (it becomes part of item ids)."""
    root = dataset(TASKS)
    (root / "agenteval.yaml").write_text(
        "name: ds\nversion: '1'\nvariants:\n  ok: agent:run\n  my variant: agent:run\n"
    )
    result = pytester.runpytest("--agenteval", "ds")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*agenteval.yaml:5: at variants.my variant*: variant name 'my variant': use letters*"]
    )


@pytest.mark.parametrize(
    ("variants", "says"),
    [
        (
            "\n  a: agent:run\n  a: agent:other\n",
            "*agenteval.yaml:5: invalid YAML: key 'a' given twice (first at line 4)",
        ),
        (" {}\n", "*agenteval.yaml:3: at variants: `variants:` names no variant*"),
    ],
)
def test_a_variant_given_twice_or_none_is_a_located_error(
    pytester: pytest.Pytester, dataset: DatasetMaker, variants: str, says: str
) -> None:
    """A variant name written twice (YAML would silently keep the last) and an empty
    `variants:` are refused at their line; nothing runs."""
    root = dataset(TASKS)
    (root / "agenteval.yaml").write_text(f"name: ds\nversion: '1'\nvariants:{variants}")
    result = pytester.runpytest("--agenteval", "ds")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([says])
    assert run_ids(pytester.path) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--agenteval-agent", "agents:base"],
            "*--agenteval-agent agents:base: dataset 'ds' compares variants (base, cand); "
            "choose them with --agenteval-variant NAME*",
        ),
        (
            ["--agenteval-variant", "nope"],
            "*--agenteval-variant nope (or ini agenteval_variants): dataset 'ds' has no such "
            "variant; its variants: base, cand",
        ),
        (
            ["--agenteval-reference", "cnad"],
            "*--agenteval-reference cnad (or ini agenteval_reference): dataset 'ds' has no such "
            "variant (did you mean 'cand'?); its variants: base, cand",
        ),
        (
            ["--agenteval-variant", "cand", "--agenteval-reference", "base"],
            "*--agenteval-reference base: not selected; add --agenteval-variant base*",
        ),
    ],
)
def test_variant_options_are_checked(
    pytester: pytest.Pytester, dataset: DatasetMaker, args: list[str], says: str
) -> None:
    """--agenteval-agent on a dataset with variants, an unknown variant or reference (named by
    its own option, with a did-you-mean) and a reference not selected are usage errors saying
    what to do; nothing runs."""
    write(dataset, {"base": "agents:base", "cand": "agents:cand"})
    result = pytester.runpytest("--agenteval", "ds", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([says])
    assert run_ids(pytester.path) == []


@pytest.mark.parametrize("how", [["-k", "cand"], ["--agenteval-variant", "cand"]])
def test_one_variant_is_selected(
    pytester: pytest.Pytester, dataset: DatasetMaker, how: list[str]
) -> None:
    """`-k VARIANT` and `--agenteval-variant VARIANT` run only that variant's attempts, and
    the run says it is narrowed by them."""
    root = write(dataset, {"base": "agents:base", "cand": "agents:cand"})
    result = pytester.runpytest_subprocess("--agenteval", "ds", *how)
    result.assert_outcomes(passed=1, failed=1)
    assert records(pytester.path) == [("t1", 0, "cand", "pass"), ("t2", 0, "cand", "fail")]
    assert (calls(root, "base"), calls(root, "cand")) == ([], ["t1 0", "t2 0"])
    meta = run_json(pytester.path)
    shown = "-k 'cand'" if how[0] == "-k" else "--agenteval-variant cand"
    assert meta["narrowed_by"] == f"{shown} (2 of 4 attempts)"
    if how[0] == "--agenteval-variant":
        assert (meta["variants"], meta["reference"]) == (["cand"], "cand")


def test_variants_from_ini_and_reference_first(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """ini `agenteval_variants` selects variants and `agenteval_reference` names the
    reference, which run.json lists first."""
    root = write(dataset, three(pytester))
    pytester.makeini("[pytest]\nagenteval_variants = base cmd\nagenteval_reference = cmd\n")
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=4)
    assert (calls(root, "cand"), len(calls(root, "cmd"))) == ([], 2)
    meta = run_json(pytester.path)
    assert (meta["variants"], meta["reference"]) == (["cmd", "base"], "cmd")


def test_added_variant_runs_alone_and_removed_one_keeps_its_records(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A variant added to a finished run's manifest is the only one whose agent a resume
    calls; a variant removed afterwards calls nothing and its records stay in the store."""
    root = write(dataset, {"base": "agents:base", "cand": "agents:cand"})
    pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    run_id = latest_run(pytester.path)
    write(dataset, three(pytester))
    plan = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "2", "--resume-suite", "--agenteval-plan"
    )
    plan.stdout.fnmatch_lines(
        [
            "*8 reused, 0 to regrade, 4 to run*",
            "  to run (no record yet): 2 tasks (4 attempts): ds/t1 [[]cmd[]], ds/t2 [[]cmd[]]",
        ]
    )
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--resume-suite")
    result.stdout.fnmatch_lines(["*8 reused*4 run now*"])
    every = ["t1 0", "t1 1", "t2 0", "t2 1"]
    assert [calls(root, v) for v in ("base", "cand", "cmd")] == [every] * 3
    assert len(records(pytester.path, run_id)) == 12
    assert run_json(pytester.path)["variants"] == ["base", "cand", "cmd"]

    write(dataset, {"base": "agents:base", "cmd": command_agent(pytester.path)})
    result = pytester.runpytest("--agenteval", "ds", "--attempts", "2", "--resume-suite")
    assert result.ret == 0
    assert [len(calls(root, v)) for v in ("base", "cand", "cmd")] == [4, 4, 4]
    assert len(records(pytester.path, run_id)) == 12
    meta = run_json(pytester.path)
    assert (meta["run_id"], meta["variants"], meta["narrowed_by"]) == (
        run_id,
        ["base", "cmd"],
        None,
    )
    assert set(meta["agent"]["variants"]["ds"]) == {"base", "cand", "cmd"}


def test_drift_of_one_variant_is_refused_naming_it(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Changing one variant's agent refuses the resume naming that variant; with
    --agenteval-allow-drift only the missing attempts run, the variant keeps the label of the
    agent its records were made with, and the next resume without the flag is refused again."""
    root = write(dataset, {"base": "agents:base", "cmd": command_agent(pytester.path)})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=4)
    write(dataset, {"base": "agents:base", "cmd": command_agent(pytester.path, version="2")})
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*a variant's agent differs from the one its records were made with*",
            "*variant 'cmd' of dataset ds: stored 'command:*', now 'command:* (version 2)'",
        ]
    )
    assert "'base'" not in result.stderr.str()
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite", "--agenteval-allow-drift")
    result.stdout.fnmatch_lines(["*4 reused*"])
    assert [len(calls(root, v)) for v in ("base", "cmd")] == [2, 2]
    (summary,) = [json.loads(p.read_text()) for p in pytester.path.rglob("summary.json")]
    assert "version 2" not in summary["variants"]["cmd"]["agent"]  # its records' agent
    again = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    assert again.ret == pytest.ExitCode.USAGE_ERROR  # still two agents: said every time


def test_a_variant_resumed_with_another_agent_is_marked_mixed(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """After --agenteval-allow-drift, a variant whose attempts two agents made says so in
    summary.json (`agents`, each with its attempts), the terminal's and summary.md's
    leaderboard and the HTML report, instead of naming the old agent alone; a variant whose
    attempts one agent made is not marked."""
    write(dataset, {"base": "agents:base", "cand": "agents:cand"})
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=3, failed=1)
    write(dataset, {"base": "agents:base", "cand": "agents:base"})
    result = pytester.runpytest(
        "--agenteval",
        "ds",
        "--attempts",
        "2",
        "--resume-suite",
        "--agenteval-allow-drift",
        "--agenteval-html",
        "r.html",
    )
    result.assert_outcomes(passed=7, failed=1)
    mixed = (
        "cand is mixed: callable:agents:base (2 attempts), callable:agents:cand (2 attempts) "
        "(resumed with --agenteval-allow-drift)"
    )
    result.stdout.fnmatch_lines(["  cand * mixed: 2 agents *", f"  {mixed}"])
    summary = summary_of(pytester)
    cand, base = summary["variants"]["cand"], summary["variants"]["base"]
    assert cand["agent"] == "mixed: 2 agents"
    assert cand["agents"] == {"callable:agents:base": 2, "callable:agents:cand": 2}
    assert base["agent"] == "callable:agents:base" and "agents" not in base
    markdown = next(pytester.path.rglob("summary.md")).read_text()
    assert "| cand | mixed: 2 agents |" in markdown and f"- {mixed}" in markdown
    page = (pytester.path / "r.html").read_text()
    assert (
        '<td class="mixed" title="callable:agents:base: 2, callable:agents:cand: 2">'
        "mixed: 2 agents</td>" in page
    )
    assert f'<p class="mixed">{mixed}</p>' in page


def test_shards_keep_a_tasks_variants_together_and_merge_keeps_them(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under --agenteval-shard every variant of a task runs in the task's shard; the shards
    hold the unsharded run's records, and `agenteval merge` keeps them and the variants."""
    sharded = ids_in_shards(2, 1)
    tasks = {f"{t}.yaml": task("ok") for ids in sharded.values() for t in ids}
    write(dataset, {"base": "agents:base", "cand": "agents:cand"}, tasks)
    whole = ["--agenteval", "ds", "-p", "no:randomly"]
    pytester.runpytest_subprocess(*whole, "-o", "cache_dir=whole")
    parts = []
    for i in (1, 2):
        pytester.runpytest_subprocess(
            *whole, "--agenteval-shard", f"{i}/2", "-o", f"cache_dir=s{i}"
        )
        parts.append(records(pytester.path, cache=f"s{i}"))
        assert {(t, v) for t, _, v, _ in parts[-1]} == {
            (t, v) for t in sharded[i] for v in ("base", "cand")
        }
    assert sorted(parts[0] + parts[1]) == records(pytester.path, cache="whole")
    assert main(["merge", "s1", "s2", "--out", "merged"]) == 0
    (merged,) = (pytester.path / "merged/agenteval/runs").iterdir()
    assert records(pytester.path, merged.name, "merged") == records(pytester.path, cache="whole")
    meta = json.loads((merged / "run.json").read_text())
    assert (meta["variants"], meta["reference"]) == (["base", "cand"], "base")
    (unsharded,) = (pytester.path / "whole/agenteval/runs").iterdir()
    whole, joined = (json.loads((r / "summary.json").read_text()) for r in (unsharded, merged))
    assert whole["variants"] and numbers(joined) == numbers(whole)


def numbers(summary: dict[str, Any]) -> dict[str, Any]:
    """What a run with variants says of its agents, without timings: every variant's numbers,
    the comparison, and each task's."""
    same = comparable(summary)
    return {
        "variants": {
            name: {**v, "totals": {k: n for k, n in v["totals"].items() if "duration" not in k}}
            for name, v in summary["variants"].items()
        },
        "comparison": summary["comparison"],
        "tasks": same["tasks"],
    }


@pytest.mark.slow
def test_workers_and_calls_in_flight_give_the_one_process_summary(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Every variant's numbers and the comparison are the same with two xdist workers and
    with 8 attempts in flight as in one process."""
    write(dataset, three(pytester))
    summaries = []
    for how in ([], ["-n", "2"], ["--agenteval-concurrency", "8"]):
        pytester.runpytest_subprocess("--agenteval", "ds", "--attempts", "2", *how)
        summaries.append(numbers(summary_of(pytester)))
    assert len(summaries[0]["variants"]) == 3
    assert summaries[1:] == [summaries[0], summaries[0]]


TIMED = """
import json, pathlib, time

HERE = pathlib.Path(__file__).parent


def _timed(name):
    def run(task):
        start = time.time()
        time.sleep(0.3)
        with (HERE / f"{name}.spans").open("a") as log:
            log.write(json.dumps([start, time.time()]) + "\\n")
        return "ok"
    return run


one, two = _timed("one"), _timed("two")
"""


def most_overlapping(root: Path, name: str) -> int:
    spans = [json.loads(line) for line in (root / f"{name}.spans").read_text().splitlines()]
    return max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)


@pytest.mark.slow
def test_each_variants_limits_hold_for_it_alone(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Each variant's `limits:` bound its own agent's calls in flight, apart from the other
    variant's, with attempts in flight across xdist workers."""
    variants = {
        "one": {"agent": "timed:one", "limits": {"max_in_flight": 1}},
        "two": {"agent": {"callable": "timed:two", "limits": {"max_in_flight": 2}}},
    }
    root = write(dataset, variants, {f"t{i}.yaml": task("ok") for i in range(6)})
    (root / "timed.py").write_text(TIMED)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "4"
    )
    result.assert_outcomes(passed=12)
    assert (most_overlapping(root, "one"), most_overlapping(root, "two")) == (1, 2)


@pytest.mark.slow
def test_a_variants_attempt_in_flight_when_a_worker_died_runs_alone_on_resume(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A worker dying in a variant's attempt leaves its key (with the variant) noted in
    flight; the resume ships the noted keys to the workers, which run them again alone."""
    root = write(dataset, {"base": "agents:base", "crashy": "agents:crashy"})
    args = ["--agenteval", "ds", "-n", "2", "--agenteval-concurrency", "2"]
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == 1  # the crash is recorded on the item xdist names, as ever
    folder = root.parent / ".pytest_cache/agenteval/runs" / latest_run(root.parent)
    lines = (folder / "records.jsonl").read_text().splitlines()
    crashed = [r for r in map(json.loads, lines) if r["status"] == "error"]
    assert crashed
    for record in crashed:  # blamed on another attempt: it names the variant's in flight
        if record["variant"] != "crashy":
            assert "t1 [crashy attempt 0]" in record["error"]
    inflight = folder / "inflight"
    noted = [json.loads(p.read_text()) for p in inflight.glob("*.json")]
    assert ["ds", "t1", 0, "crashy"] in [key for keys in noted for key in keys]
    result = pytester.runpytest_subprocess(*args, "--resume-suite")
    assert result.ret == 0, result.stdout.str()
    assert {r[3] for r in records(pytester.path)} == {"pass"}


def test_validate_builds_each_variants_agent_and_counts_tasks_once(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`agenteval validate` builds every variant's agent, names a broken one at its line in
    `variants:`, and counts each task once however many variants it has."""
    root = write(dataset, {"base": "agents:base", "gone": "agents:missing"})
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "agenteval.yaml:1: at variants.gone.agent:" in out
    assert "(the agent of 2 tasks)" in out and "2 tasks valid, 1 problem" in out


def test_a_variant_without_records_may_change_its_agent(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A variant that never ran (left out with --agenteval-variant) has no records to mix
    with: changing its agent is no drift, and the resume runs it with the new one."""
    root = write(dataset, {"base": "agents:base", "cmd": command_agent(pytester.path)})
    run = ["--agenteval", "ds", "--agenteval-run-id", "r1"]
    pytester.runpytest_subprocess(*run, "--agenteval-variant", "base").assert_outcomes(passed=2)
    write(dataset, {"base": "agents:base", "cmd": command_agent(pytester.path, version="2")})
    result = pytester.runpytest_subprocess(*run, "--resume-suite")
    result.assert_outcomes(passed=4)
    assert [len(calls(root, v)) for v in ("base", "cmd")] == [2, 2]
    assert run_json(pytester.path)["agent"]["variants"]["ds"]["cmd"].endswith("(version 2)")


@pytest.mark.parametrize(
    ("extra", "read"),
    [
        ({}, (None, None)),
        ({"variants": ["b", "a"], "reference": "b"}, (["b", "a"], "b")),
        ({"variants": "a", "reference": "a"}, (None, None)),
    ],
)
def test_run_json_variants_are_read_only_when_well_formed(
    tmp_path: Path, extra: dict[str, Any], read: tuple[Any, Any]
) -> None:
    """RunInfo holds run.json's variants and reference; a run without them, or with a
    hand-edited value that is no list of names, has none."""
    from pytest_agenteval.store.runs import Store

    store = Store(tmp_path / "agenteval")
    store.create_run("r", [{"name": "ds", "version": "1"}], {}, extra=extra)
    info = store.run("r")
    store.close()
    assert info is not None and (info.variants, info.reference) == read


def test_openai_variants_each_call_with_their_own_model(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    chat_server: ChatServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two `openai` variants (their own model and params) and a callable one on the same
    tasks: each provider variant's requests name its model, to a real HTTP server."""
    monkeypatch.setenv("AGENTEVAL_TEST_KEY", "sk-test-not-a-real-key")

    def model(name: str, temperature: float) -> dict[str, Any]:
        options = {"model": name, "temperature": temperature, "backoff": 0.01}
        return {"openai": {**options, "base_url": chat_server.base_url, "api_key_env": KEY_ENV}}

    tasks = {f"t{i}.yaml": task(input=f"question {i} <<ok>>") for i in (1, 2)}
    variants = {"small": model("m-small", 0.0), "large": model("m-large", 0.7)}
    write(dataset, {**variants, "base": "agents:base"}, tasks)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=6)
    sent = sorted((r["model"], r["temperature"]) for r in chat_server.requests)
    assert sent == [("m-large", 0.7), ("m-large", 0.7), ("m-small", 0.0), ("m-small", 0.0)]
    assert {v for _, _, v, _ in records(pytester.path)} == {"small", "large", "base"}


def test_each_variants_attempt_has_a_workspace_of_its_own(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Two variants' attempts of one task, in flight at once, each get their own copy of the
    workspace template: neither sees (or removes) what the other wrote."""
    answer = "import pathlib, sys, time\n"
    answer += "p = pathlib.Path('answer.txt'); p.write_text(sys.argv[1]); time.sleep(0.5)\n"
    answer += "print(p.read_text() + str(len(list(pathlib.Path().iterdir()))))\n"
    agent = [sys.executable, "-c", answer]
    root = write(
        dataset,
        {
            "one": {"agent": {"command": [*agent, "x"]}},
            "two": {"agent": {"command": [*agent, "y"]}},
        },
        tasks={"t.yaml": {"input": "q", "workspace": "ws", "graders": [{"regex": "^[xy]2$"}]}},
    )
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("seed")
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-concurrency", "2")
    result.assert_outcomes(passed=2)


@pytest.mark.slow
def test_the_worked_comparison_of_the_guide(pytester: pytest.Pytester) -> None:
    """examples/variants prints the leaderboard docs/guides/variants.md shows, and the third
    variant uncommented there runs alone on --resume-suite, as the guide says."""
    example = pytester.path / "examples/variants"
    shutil.copytree(Path(__file__).parent.parent / "examples/variants", example)
    first = pytester.runpytest_subprocess("--agenteval", "examples/variants")
    first.stdout.fnmatch_lines(
        [
            "56 passed, 8 failed, 0 errors; 64 run now",
            "  step-by-step  callable:agent:step_by_step  0.938 *+0.125     -0.031 to +0.312*",
        ]
    )
    manifest = example / "agenteval.yaml"  # uncomment the `checked` variant
    manifest.write_text(re.sub(r"(?m)^  # ", "  ", manifest.read_text()))
    again = pytester.runpytest_subprocess("--agenteval", "examples/variants", "--resume-suite")
    again.stdout.fnmatch_lines(
        ["87 passed, 9 failed, 0 errors; 64 reused; 32 run now", "  checked  *0.969*+0.156*"]
    )


def session_counts(pytester: pytest.Pytester) -> tuple[int, int, int]:
    """(run, reused, regraded) of the newest session."""
    counts = summary_of(pytester)["counts"]
    return counts.get("run", 0), counts.get("reused", 0), counts.get("regraded", 0)


@pytest.mark.parametrize(
    "how",
    [
        pytest.param(["-n", "2"], id="xdist", marks=pytest.mark.slow),
        pytest.param(["--agenteval-concurrency", "4"], id="concurrency"),
        pytest.param(
            ["-n", "2", "--agenteval-concurrency", "4"], id="both", marks=pytest.mark.slow
        ),
    ],
)
def test_a_variants_attempts_are_reused_regraded_and_run_as_alone(
    pytester: pytest.Pytester, dataset: DatasetMaker, how: list[str]
) -> None:
    """A resume of a run with variants decides per variant's attempt as one process does, with
    xdist workers and calls in flight: unchanged attempts are reused, changed graders regrade
    (no agent called: the workers' regrade records are keyed with their variant), a changed
    task runs its variants again."""
    both = {"base": "agents:base", "cmd": command_agent(pytester.path)}
    root = write(dataset, both)
    args = ["--agenteval", "ds", *how]
    run_layout(pytester, *args).assert_outcomes(passed=4)
    assert (len(calls(root, "base")), len(calls(root, "cmd"))) == (2, 2)
    run_layout(pytester, *args, "--resume-suite").assert_outcomes(passed=4)
    assert session_counts(pytester) == (0, 4, 0)
    write(dataset, both, {name: {**spec, "graders": ["contains"]} for name, spec in TASKS.items()})
    run_layout(pytester, *args, "--resume-suite").assert_outcomes(passed=4)
    assert session_counts(pytester) == (0, 0, 4)
    assert (len(calls(root, "base")), len(calls(root, "cmd"))) == (2, 2)
    changed = {"t1.yaml": {**task("ok"), "input": "another question"}, "t2.yaml": task("ok")}
    write(dataset, both, changed)
    run_layout(pytester, *args, "--resume-suite").assert_outcomes(passed=4)
    assert session_counts(pytester) == (2, 0, 2)
    assert calls(root, "base") == ["t1 0", "t1 0", "t2 0"]
    assert calls(root, "cmd") == ["t1 0", "t1 0", "t2 0"]
