"""File system trouble (read-only store, full disk, unwritable report folder) is one clear line,
never a traceback, and never loses what was committed; file modes follow the documented rules."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import WORKERS, DatasetMaker, aid, task
from pytest_agenteval.cli import main
from pytest_agenteval.reporting.reports import write_reports
from pytest_agenteval.reporting.summary import Summary, build_summary
from pytest_agenteval.store.runs import IndexRow, RunInfo, Store
from test_store import record


def big_outputs(dataset: DatasetMaker) -> None:
    """40 attempts of 20 kB records: more than the small file systems below hold."""
    root = dataset({f"t{i:02}.yaml": task() for i in range(40)}, manifest={"agent": "big:run"})
    (root / "big.py").write_text("def run(task):\n    return 'x' * 20_000\n")


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount here (`mount {' '.join(args)}`): {done.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts real, small tmpfs file systems (root only; tests run as root, where chmod does not
    stop writes); unmounted after the test."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        target = tmp_path / f"fs{len(mounted)}"
        target.mkdir()
        _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target))
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)


def read_only(target: Path) -> None:
    _mount("-o", "remount,ro", str(target))


def agenteval_cli(*args: str) -> tuple[int, str, str]:
    code = "import sys; from pytest_agenteval.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def no_traceback(result: pytest.RunResult) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text


@pytest.mark.parametrize("workers", WORKERS)
def test_a_full_disk_stops_the_session_and_keeps_what_was_committed(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    tmpfs: Callable[[str], Path],
    workers: list[str],
) -> None:
    """Disk full while committing: one line naming the file and errno 28, the session stops
    (interrupted), every attempt committed before stays readable, no torn line is left."""
    big_outputs(dataset)
    cache = tmpfs("256k") / "cache"
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "-o", f"cache_dir={cache}", *workers
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    no_traceback(result)
    result.stdout.fnmatch_lines(
        ["agenteval: cannot write */records.jsonl: [[]Errno 28[]] No space left on device"]
    )
    store = Store(cache / "agenteval")
    (info,) = store.runs()
    rows, bad = store.index(info.run_id)
    assert info.status == "interrupted" and 0 < len(rows) < 40 and not bad
    assert len(list(store.records(info.run_id))) == len(rows) and not store.problems


@pytest.mark.slow
def test_a_read_only_store_is_one_line_and_still_listed(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    tmpfs: Callable[[str], Path],
) -> None:
    """On a read-only store pytest stops with one usage line (path, errno 30); `agenteval runs`
    and `agenteval report --out` elsewhere still work."""
    dataset({"a.yaml": task("ok")})
    fs = tmpfs("1m")
    cache = fs / "cache"
    pytester.runpytest("--agenteval", "ds", "-o", f"cache_dir={cache}", "--agenteval-run-id", "ro1")
    read_only(fs)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-o", f"cache_dir={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    no_traceback(result)
    result.stderr.fnmatch_lines(
        ["ERROR: cannot create */runs/*: [[]Errno 30[]] Read-only file system"]
    )
    code, out, err = agenteval_cli("runs", "--cache-dir", str(cache))
    assert code == 0 and "ro1" in out and "1/1" in out and not err
    out_dir = pytester.path / "elsewhere"
    code, out, err = agenteval_cli(
        "report", "ro1", "--cache-dir", str(cache), "--out", str(out_dir)
    )
    assert code == 0 and (out_dir / "summary.json").exists()
    code, out, err = agenteval_cli("report", "ro1", "--cache-dir", str(cache))
    assert code == 1 and "Traceback" not in err
    assert (
        "cannot write" in err and "[Errno 30] Read-only file system" in err and "--out DIR" in err
    )


def test_an_unwritable_report_folder_interrupts_the_run(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    tmpfs: Callable[[str], Path],
) -> None:
    """Reports that cannot be written: one line naming the folder and the errno, the run is
    marked interrupted (not left "running"), its records are intact."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    reports = tmpfs("1m")
    read_only(reports)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-report", str(reports / "out")
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    no_traceback(result)
    result.stdout.fnmatch_lines(
        ["agenteval: cannot create */out: [[]Errno 30[]] Read-only file system"]
    )
    store = Store(pytester.path / ".pytest_cache/agenteval")
    (info,) = store.runs()
    assert info.status == "interrupted" and info.done == 2
    assert '"status": "interrupted"' in (store.runs_dir / info.run_id / "run.json").read_text()


def sample_summary() -> Summary:
    row = IndexRow(
        aid("ds", "t", 0), "", "", "pass", 1.0, 0.1, None, None, None, (), "ok", None, ""
    )
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], {}, 0.0, 0.0, 1, 1, "complete", [])
    return build_summary(run, [row], ks=None, session_counts={}, status="complete")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_report_files_follow_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Report files get the usual mode (0666 minus the umask), not mkstemp's 0600."""
    old = os.umask(umask)
    try:
        paths = write_reports(sample_summary(), tmp_path, "any")
    finally:
        os.umask(old)
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths} == {mode}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml", "summary.json", "summary.md"]


@pytest.mark.parametrize(("umask", "mode"), [(0o002, 0o644), (0o077, 0o600)])
def test_store_files_share_one_mode(tmp_path: Path, umask: int, mode: int) -> None:
    """Every file of a run is 0644 minus the umask, as the README says."""
    old = os.umask(umask)
    try:
        store = Store(tmp_path)
        store.create_run("r", [{"name": "ds", "version": "1"}], {})
        store.commit("r", record("a", 0))
        store.finish_run("r", "complete", {})
    finally:
        os.umask(old)
    files = list((store.runs_dir / "r").iterdir())
    assert {f.name for f in files} == {"run.json", "index.jsonl", "records.jsonl", "lock"}
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {mode}


def test_cli_reports_a_missing_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown run id is one line on stderr, exit 1."""
    Store(tmp_path / "agenteval")
    assert main(["report", "nope", "--cache-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("agenteval: no run 'nope' in ")
