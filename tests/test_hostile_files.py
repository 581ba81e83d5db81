"""Files an agent or a stored run can hold that must neither crash, hang nor leak: names that
are not UTF-8, FIFOs and devices in a workspace, links and hostile paths in a run's artifacts
(read by merge, export, the HTML report and show), long ids and variant names. A canary file
outside the run folder and the dataset is never read into anything the plugin writes."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
import uuid
from pathlib import Path

import pytest

from helpers import WORKERS, DatasetMaker, aid, ids_in_shards, latest_record, latest_run
from pytest_agenteval.cli import main
from pytest_agenteval.core.environment import ChangedFile
from pytest_agenteval.core.identity import AttemptId
from pytest_agenteval.execution.artifacts import collect
from pytest_agenteval.execution.environment import LocalEnvironment
from pytest_agenteval.store.artifacts import (
    Refused,
    attempt_folder,
    attempt_path,
    copy_kept,
    read,
)
from pytest_agenteval.store.files import RunFiles
from pytest_agenteval.store.runs import Store
from test_sandbox import busybox_image

ROOT = os.geteuid() == 0
"""`mknod` (a character device) needs root."""
HANG = 120
"""Seconds after which the FIFO test's session is taken as hung (it fails instead of hanging
the suite: collecting a FIFO's artifacts used to block forever)."""


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file outside every run folder and dataset; its text must never be read into one."""
    outside = tmp_path_factory.mktemp("outside")
    path = outside / "canary.txt"
    path.write_text(f"canary-{uuid.uuid4().hex}")
    (outside / "inner.txt").write_text(path.read_text())
    return path


def plant(folder: Path, canary: Path) -> None:
    """A stored attempt folder holding one good file of each kind and every hostile one."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ok.txt").write_text("fine")
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub/x.txt").write_text("x")
    (folder / "link.txt").symlink_to(canary)
    (folder / "dirlink").symlink_to(canary.parent)
    (folder / "gone.txt").symlink_to(folder / "nothing")
    (folder / "hard.txt").hardlink_to(canary)
    os.mkfifo(folder / "pipe")
    if ROOT:
        os.mknod(folder / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))


REFUSED = {
    "link.txt": "'link.txt' is a symbolic link, not a regular file",
    "dirlink/inner.txt": "'dirlink/inner.txt' goes through 'dirlink', a symbolic link, not a folder",
    "gone.txt": "'gone.txt' is a symbolic link, not a regular file",
    "hard.txt": "'hard.txt' has 2 hard links",
    "pipe": "'pipe' is a FIFO, not a regular file",
    **({"zero": "'zero' is a character device, not a regular file"} if ROOT else {}),
    "sub/../ok.txt": "'sub/../ok.txt' has an empty, '.' or '..' part",
}


def test_open_kept_reads_only_regular_files_inside_the_attempts_folder(
    tmp_path: Path, canary: Path
) -> None:
    """A stored path that is absolute, climbs out with `..`, or names a link, a folder behind
    a link, a dangling link, a hard link, a FIFO or a device is refused, saying which (without
    blocking on the FIFO or reading the device); so is an attempt folder reached through a
    link or named with `..`. Regular files inside are read; a missing one is None."""
    run = tmp_path / "run"
    folder = attempt_folder(run, aid("ds", "a", 0))
    plant(folder, canary)
    outside = os.path.relpath(canary, folder)
    refused = {**REFUSED, str(canary): "is an absolute path", outside: "'.' or '..' part"}
    for path, why in refused.items():
        with pytest.raises(Refused, match=re.escape(why)):
            read(run, aid("ds", "a", 0), path)
    assert read(run, aid("ds", "a", 0), "ok.txt") == b"fine"
    assert read(run, aid("ds", "a", 0), "sub/x.txt") == b"x"
    assert read(run, aid("ds", "a", 0), "missing.txt") is None
    (canary.parent / "a[attempt-0]").mkdir()
    (canary.parent / "a[attempt-0]/ok.txt").write_text(canary.read_text())
    (run / "artifacts/evil").symlink_to(canary.parent)
    with pytest.raises(Refused, match="goes through 'evil', a symbolic link, not a folder"):
        read(run, aid("evil", "a", 0), "ok.txt")
    with pytest.raises(Refused, match=r"the attempt's folder name '\.\./a\[attempt-0\]'"):
        read(run, aid("..", "a", 0), "ok.txt")


def test_copy_kept_copies_only_the_listed_regular_files_and_says_what_it_skipped(
    tmp_path: Path, canary: Path
) -> None:
    """Copying an attempt's artifacts copies the regular files its record lists, nothing else
    of its folder, and gives one line per listed file it did not copy (a missing one too)."""
    run, out = tmp_path / "run", tmp_path / "out"
    plant(attempt_folder(run, aid("ds", "a", 0)), canary)
    listed = ["ok.txt", *REFUSED, "missing.txt"]
    copied = copy_kept(run, aid("ds", "a", 0), listed, out)
    assert copied.files == 1
    assert len(copied.skipped) == len(REFUSED) + 1
    for line, path in zip(copied.skipped, [*REFUSED, "missing.txt"], strict=True):
        assert f"artifacts/ds/a[attempt-0]: '{path}' " in line
    assert copied.skipped[-1].endswith("'missing.txt' is listed as kept, but is not there")
    written = [p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir()]
    assert written == ["ds/a[attempt-0]/ok.txt"]


def test_artifact_folder_names_are_bounded_and_short_ones_unchanged() -> None:
    """An attempt folder is named as its item when every part fits in a file name (so older
    runs' folders are found); a longer one is cut, hashed and still says which attempt."""
    assert attempt_path(aid("ds", "a/b", 0)) == "ds/a/b[attempt-0]"
    assert (
        attempt_path(AttemptId(dataset="ds", task_id="a", variant="base", attempt=2))
        == "ds/a[base-attempt-2]"
    )
    fits = AttemptId(dataset="ds", task_id="t" * 200, variant="v" * 40, attempt=0)
    assert attempt_path(fits) == f"ds/{'t' * 200}[{'v' * 40}-attempt-0]"
    long = attempt_path(AttemptId(dataset="ds", task_id="t" * 200, variant="v" * 200, attempt=3))
    assert all(len(part.encode()) <= 255 for part in long.split("/"))
    assert re.fullmatch(r"ds/t{60}~[0-9a-f]{12}\[v{60}-attempt-3\]", long)
    assert (
        attempt_path(AttemptId(dataset="ds", task_id="t" * 200, variant="v" * 199 + "w", attempt=3))
        != long
    )
    assert attempt_path(aid("ds", "x/" + "t" * 300, 0)).startswith("ds/x_" + "t" * 58 + "~")


LONG_AGENT = """
def run(task):
    (task.workspace / "notes.txt").write_text(task.id[:5])
    return "ok"
"""


def test_a_long_task_id_and_variant_name_keep_their_artifacts(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 200-character task id with a 200-character variant name (an item name past 255
    bytes) keeps its artifacts in a bounded folder; every attempt is recorded as kept and its
    file is where `show` says, `export --artifacts` copies it; shorter names keep the folder
    names they always had."""
    long_id, long_variant = "t" * 200, "v" * 200
    tasks = {"a.yaml": {"input": "q", "expected": "ok"}}
    root = dataset({**tasks, "b.yaml": {"id": long_id, "input": "q", "expected": "ok"}})
    variants = {"base": "agent:run", long_variant: "agent:run"}
    manifest = {"name": "ds", "variants": variants, "defaults": {"artifacts": {}}}
    (root / "agenteval.yaml").write_text(json.dumps(manifest))
    (root / "agent.py").write_text(LONG_AGENT)
    result = pytester.runpytest("--agenteval", "ds")
    result.assert_outcomes(passed=4)
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    store = Store(pytester.path / ".pytest_cache/agenteval")
    records = list(store.records(run.name))
    store.close()
    assert len(records) == 4
    for record in records:
        size = len(record.task_id[:5])
        assert record.changed_files == [
            {"path": "notes.txt", "change": "added", "size": size, "kept": True}
        ]
        assert (attempt_folder(run, record.key) / "notes.txt").read_text() == record.task_id[:5]
    assert (run / "artifacts/ds/a[base-attempt-0]/notes.txt").is_file()
    assert (run / f"artifacts/ds/{long_id}[base-attempt-0]/notes.txt").is_file()
    out = pytester.path / "exported"
    cache = ["--cache-dir", str(pytester.path / ".pytest_cache")]
    assert main(["export", run.name, "--artifacts", str(out), *cache]) == 0
    assert len(list(out.rglob("notes.txt"))) == 4
    assert main(["show", run.name, f"{long_id}/{long_variant}/0", *cache]) == 0
    folder = attempt_folder(
        run, AttemptId(dataset="ds", task_id=long_id, variant=long_variant, attempt=0)
    )
    assert f"1 kept in {folder}" in capsys.readouterr().out


UNDECODABLE = """
import os


def run(task):
    (task.workspace / os.fsdecode(b"caf\\xe9 \\xff.txt")).write_text("bytes")
    (task.workspace / "notes.txt").write_text("kept")
    with open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as log:
        log.write(task.id + "\\n")
    return "ok"
"""


@pytest.mark.parametrize("workers", WORKERS)
def test_a_file_name_that_is_not_utf8_is_recorded_escaped(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    workers: list[str],
) -> None:
    """A local workspace file whose name is not UTF-8 is listed and kept with `\\xNN` for each
    byte that is not, and a note says so; the attempt is recorded (the session ends well) and
    a resume reuses it without calling the agent again."""
    root = dataset({"a.yaml": {"input": "q", "expected": "ok", "artifacts": {}}})
    (root / "agent.py").write_text(UNDECODABLE)
    args = ["--agenteval", "ds", *workers]
    run_pytest = pytester.runpytest_subprocess if workers else pytester.runpytest
    run_pytest(*args).assert_outcomes(passed=1)
    files = latest_record(pytester.path, "a", 0)["changed_files"]
    assert files == [
        {"path": "caf\\xe9 \\xff.txt", "change": "added", "size": 5, "kept": True},
        {"path": "notes.txt", "change": "added", "size": 4, "kept": True},
        {
            "note": "1 file name is not UTF-8, listed with \\xNN for each byte that is not: "
            "caf\\xe9 \\xff.txt"
        },
    ]
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    assert (run / "artifacts/ds/a[attempt-0]/caf\\xe9 \\xff.txt").read_text() == "bytes"
    result = run_pytest(*args, "--resume-suite")
    result.assert_outcomes(passed=1)
    assert dataset.calls() == ["a"]
    capsys.readouterr()
    assert main(["show", run.name, "a/0", "--cache-dir", str(pytester.path / ".pytest_cache")]) == 0
    assert "  added             5 B  caf\\xe9 \\xff.txt\n" in capsys.readouterr().out


class _NamedOddly(LocalEnvironment):
    """A plugin's environment whose listing names a file with a surrogate no byte made."""

    def changes_until(self, deadline: float | None) -> tuple[list[ChangedFile], bool]:
        return [ChangedFile("odd\ud800.txt", "added", 1, data=b"x")], True


def test_a_name_no_byte_made_is_escaped_and_the_store_never_fails_on_one(tmp_path: Path) -> None:
    """A lone surrogate in a plugin environment's file name is listed as `\\ud800`; a record
    text that still holds one is stored with U+FFFD in its place, not lost with the session."""
    made = collect(_NamedOddly(tmp_path), max_bytes=10)
    assert made.files[0]["path"] == "odd\\ud800.txt" and made.kept == {"odd\\ud800.txt": b"x"}
    files = RunFiles(tmp_path)
    assert files.lock()
    offset, length = files.append_record('{"path": "a\udcff"}')
    files.append_index(f'{{"offset": {offset}, "length": {length}}}')
    files.close()
    assert (tmp_path / "records.jsonl").read_text() == '{"path": "a\ufffd"}\n'
    assert length == len('{"path": "a\ufffd"}'.encode())


SPECIAL = f"""
import os, stat


def run(task):
    os.mkfifo(task.workspace / "pipe")
    if {ROOT}:
        os.mknod(task.workspace / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    (task.workspace / "peek").symlink_to(task.metadata["canary"])
    (task.workspace / "notes.txt").write_text("kept")
    return "ok"
"""


def test_a_fifo_or_device_in_a_local_workspace_is_listed_and_never_read(
    pytester: pytest.Pytester, dataset: DatasetMaker, canary: Path
) -> None:
    """A FIFO (which blocked the session forever) and a character device like /dev/zero
    (read until memory ran out) in a local workspace with `artifacts:` are listed, never
    opened, as is a link to a file outside; the attempt is recorded with its regular files."""
    meta = {"canary": str(canary)}
    root = dataset({"a.yaml": {"input": "q", "expected": "ok", "artifacts": {}, "metadata": meta}})
    (root / "agent.py").write_text(SPECIAL)
    result = pytester.runpytest_subprocess("--agenteval", "ds", timeout=HANG)
    result.assert_outcomes(passed=1)
    files = {f["path"]: f["kept"] for f in latest_record(pytester.path, "a", 0)["changed_files"]}
    assert files == {
        "notes.txt": True,
        "peek": False,
        "pipe": False,
        **({"zero": False} if ROOT else {}),
    }


def test_collection_past_its_time_limit_keeps_what_it_read_and_says_so(tmp_path: Path) -> None:
    """Collecting that runs past its time limit looks at no more files: the attempt's list
    ends with a note saying so, and nothing is read after it."""
    (tmp_path / "a.txt").write_text("a")
    made = collect(LocalEnvironment(tmp_path), max_bytes=100, seconds=0)
    assert made.kept == {}
    assert made.files[-1] == {"note": "collecting stopped at 0s: files after it not looked at"}
    whole = collect(LocalEnvironment(tmp_path), max_bytes=100)
    assert whole.kept == {"a.txt": b"a"} and "note" not in whole.files[-1]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    return busybox_image(tmp_path_factory)


def test_a_sandboxed_file_name_that_is_not_utf8_is_recorded_escaped(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """In a Docker sandbox too, a file name that is not UTF-8 is listed and kept escaped and
    the attempt is recorded."""
    agent = ["sh", "-c", "cd {workspace} && printf x > \"$(printf 'caf\\351.txt')\""]
    dataset(
        {"a.yaml": {"input": "q", "expected": ""}},
        manifest={
            "agent": {"command": agent},
            "defaults": {"sandbox": {"docker": {"image": image}}},
        },
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    files = latest_record(pytester.path, "a", 0)["changed_files"]
    assert files[0] == {"path": "caf\\xe9.txt", "change": "added", "size": 1, "kept": True}
    assert "not UTF-8" in files[-1]["note"]


HOSTILE_AGENT = """
import os


def run(task):
    ws = task.workspace
    (ws / "notes.txt").write_text("kept")
    (ws / "sub").mkdir()
    (ws / "sub/inner.txt").write_text("inner")
    (ws / "peek").symlink_to(task.metadata["canary"])
    os.mkfifo(ws / "pipe")
    (ws / os.fsdecode(b"caf\\xe9.txt")).write_text("bytes")
    return "ok"
"""


def test_no_host_file_outside_the_run_reaches_a_report_merge_export_or_page(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    canary: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Two shards run an agent that leaves a link to a canary file, a FIFO and a name that is
    not UTF-8 (and a JSONL row of raw CESU-8 bytes fails to load); then one shard's stored
    run is made hostile: kept files replaced by links to the canary (a file, a folder, a
    dangling one) and a record naming the canary by absolute and by `..` path. Merge,
    `export --artifacts`, `report --html`, a session's `--agenteval-html` and `show` all go
    on, each saying what it refused or skipped, and no file they write holds the canary's
    text."""
    secret = canary.read_text()
    shards = ids_in_shards(2, 2)
    meta = {"canary": str(canary)}
    tasks = {
        f"{t}.yaml": {"input": "q", "expected": "ok", "metadata": meta}
        for ids in shards.values()
        for t in ids
    }
    root = dataset(
        {
            **tasks,
            "rows.yaml": {
                "source": "rows.jsonl",
                "id": "r{k}",
                "input": "q",
                "expected": "ok",
                "metadata": meta,
            },
        },
        manifest={"agent": "agent:run", "defaults": {"artifacts": {}}},
    )
    (root / "rows.jsonl").write_bytes(b'{"k": 1}\n{"k": 2, "q": "\xed\xa0\x80"}\n')
    (root / "agent.py").write_text(HOSTILE_AGENT)
    caches = [pytester.path / "shard1", pytester.path / "shard2"]
    for cache, shard in zip(caches, ("1/2", "2/2"), strict=True):
        args = ["--agenteval", "ds", "--agenteval-shard", shard, "-o", f"cache_dir={cache}"]
        result = pytester.runpytest(*args)
        if shard == "1/2":  # the shard that reports load errors
            assert result.ret == 1
            result.stdout.fnmatch_lines(["*ds/rows.jsonl:2: the row is not UTF-8 text*"])
        else:
            assert result.ret == 0
    store = Store(caches[0] / "agenteval")
    (run_id,) = [run.run_id for run in store.runs()]
    run = store.runs_dir / run_id
    first, second = (aid("ds", t, 0) for t in shards[1])
    folder = attempt_folder(run, first)
    (folder / "notes.txt").unlink()
    (folder / "notes.txt").symlink_to(canary)
    (folder / "sub/inner.txt").unlink()
    (folder / "sub").rmdir()
    (folder / "sub").symlink_to(canary.parent)
    (folder / "extra").symlink_to(canary)  # listed by no record
    (folder / "caf\\xe9.txt").unlink()
    (folder / "caf\\xe9.txt").symlink_to(canary.parent / "nothing")  # dangling
    record = store.record(run_id, second)
    assert record is not None
    above = os.path.relpath(canary, attempt_folder(run, second))
    forged = [
        {"path": str(canary), "change": "added", "size": 10, "kept": True},
        {"path": above, "change": "added", "size": 10, "kept": True},
        {"path": "notes.txt", "change": "added", "size": 4, "kept": True},
    ]
    store.claim_run(run_id)
    store.commit(run_id, dataclasses.replace(record, changed_files=forged))
    store.release_run(run_id, "complete")
    store.close()
    capfd.readouterr()

    merged = pytester.path / "merged"
    assert main(["merge", *map(str, caches), "--out", str(merged)]) == 0
    said = capfd.readouterr()
    skipped = [line for line in said.err.splitlines() if line.startswith("  skipped ")]
    assert len(skipped) == 5, said.err
    assert "5 artifact files not copied: only the regular files a record lists" in said.err
    for why in (
        "'notes.txt' is a symbolic link",
        "'sub/inner.txt' goes through 'sub', a symbolic link, not a folder",
        "'caf\\xe9.txt' is a symbolic link",
        f"'{canary}' is an absolute path",
        f"'{above}' has an empty, '.' or '..' part",
    ):
        assert any(why in line for line in skipped), (why, skipped)
    (merged_run,) = (merged / "agenteval/runs").iterdir()

    for cache, run_name in ((caches[0], run_id), (merged, merged_run.name)):
        where = ["--cache-dir", str(cache)]
        page = pytester.path / f"{run_name}.html"
        assert main(["report", run_name, "--html", str(page), *where]) == 0
        said = capfd.readouterr()
        assert "agenteval: store damage:" in said.err and "; not read" in said.err
        exported = pytester.path / f"exported-{run_name}"
        assert main(["export", run_name, "--artifacts", str(exported), *where]) == 0
        for task_id in shards[1]:
            assert main(["show", run_name, f"{task_id}/0", *where]) == 0
        said = capfd.readouterr()
        assert "(REFUSED, not read: " in said.out
    args = ["--agenteval", "ds", "--resume-suite", "--agenteval-html", "session.html"]
    result = pytester.runpytest(*args, "--agenteval-shard", "1/2", "-o", f"cache_dir={caches[0]}")
    result.stdout.fnmatch_lines(["*store damage:*'notes.txt' is a symbolic link*; not read"])
    session_page = (pytester.path / "session.html").read_text()
    assert "not read: 'notes.txt' is a symbolic link, not a regular file" in session_page

    leaked = [
        path
        for path in pytester.path.rglob("*")
        if stat.S_ISREG(path.lstat().st_mode) and secret.encode() in path.read_bytes()
    ]
    assert leaked == []
    outputs = capfd.readouterr()
    assert secret not in outputs.out + outputs.err + result.stdout.str() + result.stderr.str()
