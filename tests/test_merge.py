"""`agenteval merge`: shard runs made on separate machines (separate cache dirs) merge into one
run equal to the unsharded run, which the store, `agenteval` and --resume-suite take like any
run; partial, overlapping or drifting shards are refused by name; merging is idempotent."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from junitparser import xunit2

from helpers import DatasetMaker, comparable, ids_in_shards, task
from pytest_agenteval.cli import main

SHARDED = ids_in_shards(3, 2)
TASKS: dict[str, Any] = {
    f"{t}.yaml": task(metadata={"answers": ["ok", "no"]}) if i == 0 else task("ok")
    for ids in SHARDED.values()
    for i, t in enumerate(ids)
}
TASKS[f"{SHARDED[3][1]}.yaml"] = task(metadata={"raise": "boom"})
TASKS["broken.yaml"] = "input: ["
ARGS = ["--agenteval", "ds", "--attempts", "2", "-p", "no:xdist"]


def run_shards(pytester: pytest.Pytester, *extra: str, total: int = 3) -> list[Path]:
    """Each shard as its own session with its own cache dir, like N CI machines."""
    return [session(pytester, f"shard{i}", f"{i}/{total}", *extra) for i in range(1, total + 1)]


def merge(*args: str | Path) -> int:
    return main(["merge", *map(str, args)])


def merged_summary(out: Path) -> dict[str, Any]:
    (summary,) = (out / "agenteval/runs").glob("*/summary.json")
    return cast(dict[str, Any], json.loads(summary.read_text()))


def junit_cases(path: Path) -> list[tuple[Any, ...]]:
    """Each testcase of a per-task junit.xml, without timings."""
    cases = []
    for suite in xunit2.JUnitXml.fromfile(str(path)):
        for case in suite:
            assert isinstance(case, xunit2.TestCase)  # what an xunit2 suite holds
            results = [(r._tag, r.message, r.text) for r in case.result]
            props = {p.name: p.value for p in case.properties()} if case.properties() else {}
            cases.append((case.classname, case.name, results, props))
    return cases


def test_three_shards_merge_into_the_unsharded_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """3 shard sessions (separate caches) merged equal the unsharded session's summary.json
    (metrics, per task, load errors counted once) and per-task junit.xml; the merged run is
    listed by `agenteval runs`, re-rendered by `agenteval report`, checked clean by `agenteval
    repair`, and --resume-suite continues it without calling the agent."""
    dataset(TASKS)
    pytester.runpytest(*ARGS, "-o", "cache_dir=whole")
    (whole_dir,) = (pytester.path / "whole/agenteval/runs").iterdir()
    whole = json.loads((whole_dir / "summary.json").read_text())
    caches = run_shards(pytester)
    out = pytester.path / "merged"
    # A SRC is a cache dir, a folder of run folders (a CI artifact) or a run folder.
    artifact = pytester.path / "artifacts/agenteval-shard-2"
    shutil.copytree(caches[1] / "agenteval/runs", artifact)
    (run3,) = (caches[2] / "agenteval/runs").iterdir()
    assert merge(caches[0], artifact, run3, "--out", out) == 0
    summary = merged_summary(out)
    assert comparable(summary) == comparable(whole)
    assert summary["counts"]["load_error"] == 1 and summary["status"] == "complete"
    folder = out / "agenteval/runs" / summary["run_id"]
    assert junit_cases(folder / "junit.xml") == junit_cases(whole_dir / "junit.xml")
    capsys.readouterr()
    cache = ["--cache-dir", str(out)]
    assert main(["runs", *cache]) == 0
    assert "merged from 3 shards" in capsys.readouterr().out
    assert main(["report", summary["run_id"], *cache]) == 0
    assert main(["repair", summary["run_id"], *cache]) == 0
    assert "12 stored attempts checked" in capsys.readouterr().out
    check_idempotent(caches, out, folder)
    calls = len(dataset.calls())
    result = pytester.runpytest(*ARGS, "--resume-suite", "-o", f"cache_dir={out}")
    result.stdout.fnmatch_lines([f"agenteval: run {summary['run_id']} (resuming)*"])
    assert len(dataset.calls()) == calls


def check_idempotent(caches: list[Path], out: Path, folder: Path) -> None:
    """Merging again (sources in another order), or merging the merged run with a shard it
    holds, writes the same run: same id, same records and index byte for byte, and the records
    are those the shards stored."""
    first = (folder / "records.jsonl").read_bytes(), (folder / "index.jsonl").read_bytes()
    assert merge(*reversed(caches), "--out", out) == 0
    assert merge(out, caches[1], "--out", out) == 0
    assert [p.name for p in (out / "agenteval/runs").iterdir()] == [folder.name]
    assert ((folder / "records.jsonl").read_bytes(), (folder / "index.jsonl").read_bytes()) == first
    stored = [
        line
        for cache in caches
        for run in (cache / "agenteval/runs").iterdir()
        for line in (run / "records.jsonl").read_bytes().splitlines()
    ]
    assert sorted(first[0].splitlines()) == sorted(stored)


def test_partial_overlapping_drifting_or_damaged_shards_are_refused(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing shard is named; two different runs of one shard are named with the tasks both
    hold; shards of another agent version, dataset version or shard count are refused naming
    what differs (--allow-drift merges the first two); a damaged shard is refused naming what
    to do; nothing is written by a refused merge."""
    dataset(TASKS)
    caches = run_shards(pytester)
    out = pytester.path / "merged"
    assert merge(caches[0], caches[2], "--out", out) == 1
    assert (
        "missing shard 2/3: no source holds a run of it (add its run folder or cache dir to "
        "the sources)" in capsys.readouterr().err
    )
    again = session(pytester, "again", "2/3")
    assert merge(*caches, again, "--out", out) == 1
    err = capsys.readouterr().err
    assert "overlapping shards: shard 2/3 is in run" in err and "(from" in err
    assert f"both hold tasks {', '.join(sorted(SHARDED[2]))}" in err
    assert not (out / "agenteval/runs").exists() or not any((out / "agenteval/runs").iterdir())
    other = session(pytester, "other", "3/3", "--agenteval-agent-version", "2")
    assert merge(caches[0], caches[1], other, "--out", out) == 1
    err = capsys.readouterr().err
    assert "different agents:" in err and "version: stored None, now '2'" in err
    assert merge(caches[0], caches[1], other, "--out", out, "--allow-drift") == 0
    manifest = pytester.path / "ds/agenteval.yaml"
    manifest.write_text(manifest.read_text().replace('"version": "1"', '"version": "2"'))
    four = session(pytester, "four", "3/4")
    assert merge(caches[0], caches[1], four, "--out", out) == 1
    err = capsys.readouterr().err
    assert "different shard counts:" in err and "one of 4" in err
    assert "different dataset versions:" in err and "ds 2" in err
    (folder,) = (caches[1] / "agenteval/runs").iterdir()
    records = folder / "records.jsonl"
    records.write_bytes(records.read_bytes()[:-40])
    assert merge(*caches, "--out", pytester.path / "merged2") == 1
    err = capsys.readouterr().err
    assert "has damaged stored attempts" in err and "Resume that shard" in err


def session(pytester: pytest.Pytester, cache: str, shard: str, *extra: str) -> Path:
    """One shard's session in its own cache dir."""
    path = pytester.path / cache
    pytester.runpytest(*ARGS, "--agenteval-shard", shard, *extra, "-o", f"cache_dir={path}")
    return path


def test_merge_gates_on_the_pass_rate(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """--min-pass-rate judges the merged run as --agenteval-min-pass-rate judges a session; the
    README's shard flags keep shard sessions green although attempts fail or error."""
    dataset({k: v for k, v in TASKS.items() if k != "broken.yaml"})
    green = ["--agenteval-min-pass-rate", "0", "--agenteval-allow-errors"]
    caches = []
    for i in (1, 2, 3):
        cache = pytester.path / f"shard{i}"
        result = pytester.runpytest(
            *ARGS, "--agenteval-shard", f"{i}/3", *green, "-o", f"cache_dir={cache}"
        )
        assert result.ret == 0
        caches.append(cache)
    out = pytester.path / "merged"
    assert merge(*caches, "--out", out, "--min-pass-rate", "0.5", "--allow-errors") == 0
    assert "gate met: pass@1 0.583" in capsys.readouterr().out
    assert merge(*caches, "--out", out, "--min-pass-rate", "0.9", "--allow-errors") == 1
    assert "gate NOT met: pass@1 0.583 is below 0.9" in capsys.readouterr().out
    # merge's own flags are named, not the pytest options
    assert merge(*caches, "--out", out, "--min-pass-rate", "0.5") == 1
    printed = capsys.readouterr().out
    assert "attempt(s) errored (--allow-errors accepts them)" in printed
    assert "--agenteval-" not in printed
    assert merge(*caches, "--out", out, "--min-pass-rate", "0.5", "--allow-errors") == 0
    assert "gate met: pass@1 0.583 >= 0.5 (--min-pass-rate)" in capsys.readouterr().out


def two_shards(pytester: pytest.Pytester, dataset: DatasetMaker) -> list[Path]:
    """Shards 1/2 and 2/2 of a 4-task dataset, each in its own cache dir."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    caches = [pytester.path / f"shard{i}" for i in (1, 2)]
    for i, cache in enumerate(caches, 1):
        pytester.runpytest(
            "--agenteval", "ds", "-p", "no:xdist", "--agenteval-shard", f"{i}/2",
            "-o", f"cache_dir={cache}",
        )  # fmt: skip
    return caches


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


def merge_in_child(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`agenteval merge` in a child with 2 GiB of address space, and a hang guard."""
    return subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "merge", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory,
    )


def run_folder(cache: Path) -> Path:
    (folder,) = (cache / "agenteval/runs").iterdir()
    return folder


@pytest.mark.parametrize("kind", ["FIFO", "symbolic link"])
def test_an_index_that_is_no_regular_file_is_named_not_read(
    pytester: pytest.Pytester, dataset: DatasetMaker, kind: str
) -> None:
    """An index.jsonl that is a FIFO (reading it would block) or a link to /dev/zero (it
    never ends; a link is never followed) makes merge fail at once, saying which file is
    what."""
    caches = two_shards(pytester, dataset)
    index = run_folder(caches[1]) / "index.jsonl"
    index.unlink()
    if kind == "FIFO":
        os.mkfifo(index)
    else:
        index.symlink_to("/dev/zero")
    done = merge_in_child(*caches, "--out", pytester.path / "merged")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot read {index}: [Errno 22] it is a {kind}, not a regular file" in done.stderr


def test_a_record_length_past_the_end_is_no_memory_error_in_merge(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`"record": [offset, 10**12]` in a shard's index is never read: the record is found where
    it lies, and the merge holds every attempt."""
    caches = two_shards(pytester, dataset)
    index = run_folder(caches[0]) / "index.jsonl"
    lines = [json.loads(raw) for raw in index.read_text().splitlines()]
    lines[0]["record"][1] = 10**12
    index.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = merge_in_child(*caches, "--out", pytester.path / "merged")
    assert done.returncode == 0, done.stderr
    assert merged_summary(pytester.path / "merged")["n_attempts"] == 4


def test_two_copies_of_one_shard_run_are_one_only_when_identical(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shard run given twice is taken once when the copies are byte-identical; copies that
    differ are refused naming both, whichever is named first."""
    caches = two_shards(pytester, dataset)
    copy = pytester.path / "artifact" / run_folder(caches[0]).name
    shutil.copytree(run_folder(caches[0]), copy)
    out = pytester.path / "merged"
    assert merge(caches[0], copy, caches[1], "--out", out) == 0
    assert merged_summary(out)["n_attempts"] == 4
    meta = json.loads((copy / "run.json").read_text())
    (copy / "run.json").write_text(json.dumps({**meta, "status": "interrupted"}))
    capsys.readouterr()
    for order in ([caches[0], copy], [copy, caches[0]]):
        assert merge(*order, caches[1], "--out", pytester.path / "again") == 1
        err = capsys.readouterr().err
        assert f"run {meta['run_id']} is given twice, and the copies differ in run.json" in err
        assert str(copy) in err and str(run_folder(caches[0])) in err


def test_a_shard_whose_index_was_cut_merges_from_its_records(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A shard's index.jsonl cut inside its first line: merge re-indexes its records.jsonl and
    holds every attempt, instead of refusing a shard whose records are intact."""
    caches = two_shards(pytester, dataset)
    index = run_folder(caches[1]) / "index.jsonl"
    index.write_bytes(index.read_bytes()[:20])
    assert merge(*caches, "--out", pytester.path / "merged") == 0
    assert merged_summary(pytester.path / "merged")["n_attempts"] == 4
