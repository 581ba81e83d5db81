"""Artifacts: the files an attempt's agent created or changed, kept with the attempt in the
run store (up to `artifacts: {max_bytes}`), shown by `agenteval show`, the HTML report and
`agenteval export --artifacts`, and never seen by a rerun. Against the real Docker daemon
(the `image` fixture of test_sandbox.py skips without one, except under `CI=true`)."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

import pytest

from browser import Browser, needs_chromium
from helpers import WORKERS, DatasetMaker, latest_record, latest_run, run_layout
from pytest_agenteval.cli import main
from pytest_agenteval.core.model import DockerImage, SandboxSpec
from pytest_agenteval.execution.artifacts import MAX_LISTED, collect, keepable
from pytest_agenteval.execution.docker import DockerEnvironment, DockerSession
from pytest_agenteval.execution.environment import LocalEnvironment
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


@pytest.mark.parametrize("workers", WORKERS)
def test_changed_files_are_kept_up_to_the_cap_and_listed(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str, workers: list[str]
) -> None:
    """A sandboxed attempt's changed files are listed in its record (path, change, size,
    kept) and those that fit in `max_bytes` are kept in the run store; one past the cap is
    listed, not kept; under xdist the worker ships them to the controller, which writes them."""
    _boxed_dataset(dataset, image, artifacts={"max_bytes": 100})
    root = pytester.path
    result = run_layout(pytester, "--agenteval", "ds", *workers)
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


def test_a_rerun_never_sees_the_earlier_attempts_artifacts(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """An attempt run again by a resume (its task changed) replaces its kept files: the
    earlier session's are gone from the run store, the new ones are there."""
    agent = ["sh", "-c", 'cd {workspace} && echo -n "$0" > "$0.txt"', "{input}"]

    def write(answer: str) -> None:
        dataset(
            {"a.yaml": {"input": answer, "expected": answer}},
            manifest={
                "agent": {"command": agent},
                "defaults": {"sandbox": {"docker": {"image": image}}},
            },
        )

    write("first")
    pytester.runpytest("--agenteval", "ds").assert_outcomes(failed=1)
    assert _artifacts(pytester.path) == {"first.txt": b"first"}
    write("second")
    pytester.runpytest("--agenteval", "ds", "--resume-suite").assert_outcomes(failed=1)
    assert _artifacts(pytester.path) == {"second.txt": b"second"}
    listed = latest_record(pytester.path, "a", 0)["changed_files"]
    assert [f["path"] for f in listed] == ["second.txt"]


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    return Browser(tmp_path / "chromium-profile")


LOCAL_AGENT = """
def run(task):
    (task.workspace / "page.html").write_text("<script>alert(1)</script>")
    (task.workspace / "blob.bin").write_bytes(bytes(range(256)))
    (task.workspace / "seed.txt").write_text("changed")
    return task.input
"""


@needs_chromium
def test_a_local_task_keeps_artifacts_only_when_asked_and_shows_them(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    browser: Browser,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A local task with `artifacts:` keeps its changed files (one without keeps none and
    its record has no `changed_files`); `agenteval show` lists them, the HTML drill-down
    shows names, sizes and a small text file's content as text, and `agenteval export
    --artifacts DIR` writes them below DIR/<dataset>/<task>[attempt-N]/."""
    root = dataset(
        {
            "kept.yaml": {"input": "ok", "expected": "ok", "workspace": "ws", "artifacts": {}},
            "plain.yaml": {"input": "ok", "expected": "ok", "workspace": "ws"},
        },
        manifest={"agent": "agent:run"},
    )
    (root / "agent.py").write_text(LOCAL_AGENT)
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("seed")
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-html", "r.html")
    result.assert_outcomes(passed=2)
    assert "changed_files" not in latest_record(pytester.path, "plain", 0)
    assert [f["path"] for f in latest_record(pytester.path, "kept", 0)["changed_files"]] == [
        "blob.bin",
        "page.html",
        "seed.txt",
    ]
    run = latest_run(pytester.path)
    store = ["--cache-dir", str(pytester.path / ".pytest_cache")]
    capsys.readouterr()
    assert main(["show", run, "kept/0", *store]) == 0
    shown = capsys.readouterr().out
    assert "files changed: 3, 3 kept in" in shown
    assert "  added           256 B  blob.bin\n" in shown
    out = tmp_path / "exported"
    assert main(["export", run, "--artifacts", str(out), *store]) == 0
    assert (out / "ds/kept[attempt-0]/page.html").read_text() == "<script>alert(1)</script>"
    assert (out / "ds/kept[attempt-0]/blob.bin").read_bytes() == bytes(range(256))
    assert not (out / "ds/plain[attempt-0]").exists()
    dom, console = browser.dom(pytester.path / "r.html", "#task=kept")
    assert console == []
    drill = dom[dom.index('class="drill-row"') :]
    assert "files changed (3, 3 kept)" in drill
    assert "added blob.bin 256 B" in drill
    assert "<pre>&lt;script&gt;alert(1)&lt;/script&gt;</pre>" in drill
    assert "<script>alert" not in drill


REGRADED_AGENT = """
def run(task):
    (task.workspace / "notes.txt").write_text("thinking")
    return "ok"
"""


def test_a_regrade_removes_the_attempts_artifacts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A regrade (a changed `expected`: the stored answer judged again, no agent call) makes
    a new record without files, and the attempt's earlier artifacts are gone from the store."""
    write = partial(dataset, manifest={"agent": "agent:run", "defaults": {"artifacts": {}}})
    root = write({"a.yaml": {"input": "q", "expected": "ok"}})
    (root / "agent.py").write_text(REGRADED_AGENT)
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    assert _artifacts(pytester.path) == {"notes.txt": b"thinking"}
    write({"a.yaml": {"input": "q", "expected": "no"}})
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(failed=1)
    record = latest_record(pytester.path, "a", 0)
    assert record["regraded"] is True and "changed_files" not in record
    assert _artifacts(pytester.path) == {}


def test_merged_shards_keep_their_artifacts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """`agenteval merge` copies each shard's artifacts into the merged run, in the same
    layout."""
    names = [f"t{i}" for i in range(4)]
    root = dataset(
        {f"{name}.yaml": {"input": "q", "expected": "ok"} for name in names},
        manifest={"agent": "agent:run", "defaults": {"artifacts": {}}},
    )
    (root / "agent.py").write_text(REGRADED_AGENT)
    caches = []
    for shard in ("1/2", "2/2"):
        cache = pytester.path / f"shard{shard[0]}"
        args = ["--agenteval", "ds", "-p", "no:xdist", "--agenteval-shard", shard]
        pytester.runpytest(*args, "-o", f"cache_dir={cache}")
        caches.append(cache)
    out = pytester.path / "merged"
    assert main(["merge", *map(str, caches), "--out", str(out)]) == 0
    (run,) = (out / "agenteval/runs").iterdir()
    kept = sorted(p.relative_to(run / "artifacts").as_posix() for p in run.rglob("notes.txt"))
    assert kept == [f"ds/{name}[attempt-0]/notes.txt" for name in names]


def test_collect_lists_a_thousand_files_keeps_what_fits_and_no_link(tmp_path: Path) -> None:
    """Collecting a local folder's changes keeps files in path order while they fit, never
    a link's target, lists the first MAX_LISTED files one by one and counts the rest."""
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(MAX_LISTED + 2):
        (root / f"f{i:04}.txt").write_text("abc")
    (root / "a-link").symlink_to("/etc/hostname")
    made = collect(LocalEnvironment(root), max_bytes=7)
    assert made.files[0] == {"path": "a-link", "change": "added", "size": 13, "kept": False}
    assert made.kept == {"f0000.txt": b"abc", "f0001.txt": b"abc"}
    assert len(made.files) == MAX_LISTED + 1
    assert made.files[-1] == {"note": "3 more files (9 B) not listed"}
    assert not keepable("../x") and not keepable("/etc/x") and not keepable("a//b")
    assert keepable("out/page.html")


def test_containers_torn_down_together_are_all_removed(image: str) -> None:
    """Containers torn down while a removal runs wait for the next one (one `docker rm` at a
    time, several containers each); once the session waits, none is left."""
    session = DockerSession()
    spec = SandboxSpec(docker=DockerImage(image=image))
    names = [f"agenteval-test-batch-{os.getpid()}-{i}" for i in range(3)]
    made = [DockerEnvironment(spec, name, None, session) for name in names]
    for sandbox in made:
        sandbox.teardown(keep=False)
    session.wait()
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name=agenteval-test-batch-{os.getpid()}-"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.splitlines()[1:] == []


def test_an_agent_that_fails_still_leaves_its_files(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """An agent that writes a file and then exits with an error is an error whose files are
    kept all the same: they are what a person looks at (its container is gone)."""
    agent = ["sh", "-c", "cd {workspace} && echo -n half > log.txt && exit 3"]
    dataset(
        {"a.yaml": {"input": "x", "expected": "x"}},
        manifest={
            "agent": {"command": agent},
            "defaults": {"sandbox": {"docker": {"image": image}}},
        },
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=1)
    record = latest_record(pytester.path, "a", 0)
    assert record["phase"] == "agent" and record["changed_files"] == [
        {"path": "log.txt", "change": "added", "size": 4, "kept": True}
    ]
    assert _artifacts(pytester.path) == {"log.txt": b"half"}


@pytest.mark.slow
def test_an_agent_killed_at_its_timeout_still_leaves_its_files(
    pytester: pytest.Pytester, dataset: DatasetMaker, image: str
) -> None:
    """The files of an agent whose container was killed at the timeout are read from the
    stopped container and kept."""
    agent = ["sh", "-c", "cd {workspace} && echo -n begun > log.txt && sleep 600"]
    dataset(
        {"a.yaml": {"input": "x", "expected": "x", "timeout": 2}},
        manifest={
            "agent": {"command": agent},
            "defaults": {"sandbox": {"docker": {"image": image}}},
        },
    )
    pytester.runpytest("--agenteval", "ds").assert_outcomes(errors=1)
    assert latest_record(pytester.path, "a", 0)["error_type"] == "AgentTimeout"
    assert _artifacts(pytester.path) == {"log.txt": b"begun"}


@pytest.mark.parametrize("workers", WORKERS)
def test_each_variants_sandboxed_attempts_keep_their_own_artifacts(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    image: str,
    workers: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two variants of one sandboxed task (with attempts in flight at once) each run in
    containers of their own and keep their files apart, in folders named like their items,
    which `agenteval show RUN TASK/VARIANT/N` lists."""
    write = ["sh", "-c", 'cd {workspace} && echo -n "$0" > answer.txt && cat answer.txt']
    dataset(
        {"a.yaml": {"input": "x", "expected": "x"}},
        manifest={
            "agent": None,
            "variants": {
                "one": {"agent": {"command": [*write, "x"]}},
                "two": {"agent": {"command": [*write, "y"]}},
            },
            "defaults": {"sandbox": {"docker": {"image": image}}},
        },
    )
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--agenteval-concurrency", "2", *workers
    )
    result.assert_outcomes(passed=1, failed=1)
    run_id = latest_run(pytester.path)
    kept = pytester.path / ".pytest_cache/agenteval/runs" / run_id / "artifacts/ds"
    assert (kept / "a[one-attempt-0]/answer.txt").read_bytes() == b"x"
    assert (kept / "a[two-attempt-0]/answer.txt").read_bytes() == b"y"
    assert main(["show", run_id, "a/two/0"]) == 0
    assert "answer.txt" in capsys.readouterr().out


def test_a_deletion_only_attempt_names_no_artifacts_folder(
    pytester: pytest.Pytester, dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """An attempt whose agent only deleted a file keeps no bytes: `agenteval show` says none
    was kept and names no artifacts folder (none exists)."""
    root = dataset(
        {"a.yaml": {"input": "ok", "expected": "ok", "workspace": "ws", "artifacts": {}}},
        manifest={"agent": {"command": ["sh", "-c", "rm {workspace}/seed.txt && echo ok"]}},
    )
    (root / "ws").mkdir()
    (root / "ws/seed.txt").write_text("seed")
    pytester.runpytest("--agenteval", "ds").assert_outcomes(passed=1)
    run = latest_run(pytester.path)
    assert latest_record(pytester.path, "a", 0)["changed_files"] == [
        {"path": "seed.txt", "change": "deleted", "size": 0, "kept": False}
    ]
    capsys.readouterr()
    assert main(["show", run, "a/0", "--cache-dir", str(pytester.path / ".pytest_cache")]) == 0
    shown = capsys.readouterr().out
    assert "files changed: 1, none kept\n" in shown
    assert "artifacts" not in shown.partition("files changed")[2]
    assert not (pytester.path / ".pytest_cache/agenteval/runs" / run / "artifacts").exists()
