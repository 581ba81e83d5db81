"""The sandbox documentation runs as written, against the real Docker daemon: examples/sandbox
as its README says, and the first sandbox guide's files and commands (its busybox part is
examples/sandbox itself, its Python part an image of this machine's Python), each command
printing what the page shows."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_sandbox import busybox_image
from written import schema_problems

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "sandbox"
PAGE = ROOT / "docs" / "guides" / "first-sandbox.md"
FILE = re.compile(r"^```\{code-block\} \w+\n:caption: ([^\n]+)\n\n(.*?)^```", re.S | re.M)
CONSOLE = re.compile(r"^```console\n(.*?)^```", re.S | re.M)
MACHINE = ("platform ", "plugins: ", "rootdir: ")
"""Lines that name the machine a command ran on, not what it did."""
MASKS = [
    (re.compile(r"sha256:[0-9a-f]{64}"), "sha256:<id>"),
    (re.compile(r"\b[0-9a-f]{8}\b"), "<run>"),
    (re.compile(r"\b\d+\.\d+s\b"), "<seconds>"),
    (re.compile(r"\S*/\.pytest_cache/"), ".pytest_cache/"),
    (re.compile(r"(BusyBox|Python) v?\d[^ ]*( \([^)]*\))?"), r"\1 <version>"),
    (re.compile(r"={3,}"), "=="),
    (re.compile(r" {2,}"), " "),
]
"""What differs from run to run and machine to machine: ids, times, paths, versions, and the
padding that follows a time's width."""


def page_files(text: str) -> dict[str, str]:
    """A page's files: its code blocks with a caption naming their path."""
    return {path: body for path, body in FILE.findall(text)}


def sessions(text: str) -> list[tuple[str, list[str]]]:
    """A page's console blocks as `$ command` lines, each with the lines shown after it."""
    found: list[tuple[str, list[str]]] = []
    for block in CONSOLE.findall(text):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:], []))
            else:
                found[-1][1].append(line)
    return found


def masked(lines: list[str]) -> list[str]:
    """The lines as any run on any machine prints them."""
    kept = []
    for line in lines:
        if line.startswith(MACHINE):
            continue
        for pattern, replacement in MASKS:
            line = pattern.sub(replacement, line)
        kept.append(line.rstrip())
    return kept


def printed(command: str, cwd: Path) -> str:
    """What `command` prints (stdout and stderr as a terminal interleaves them), run as a
    user would in `cwd` with this project's `pytest`, `agenteval` and `python3` on PATH; it
    must exit 0."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        shlex.split(command),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"$ {command}\n{done.stdout}"
    return done.stdout


def run_as_shown(text: str, cwd: Path) -> None:
    """Run a page's console commands in order in `cwd`; each prints what the page shows."""
    shown = sessions(text)
    assert shown
    for command, lines in shown:
        said = printed(command, cwd).splitlines()
        assert masked(said) == masked(lines), f"$ {command}\n" + "\n".join(said)


def example_files() -> dict[str, str]:
    """The files of examples/sandbox a clone has, by path in the dataset (the README aside)."""
    return {
        path.relative_to(EXAMPLE).as_posix(): path.read_text()
        for path in sorted(EXAMPLE.rglob("*"))
        if path.is_file()
        and path.name not in ("README.md", ".gitignore", "busybox")
        and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def docker_answers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip without a daemon and busybox-static (fail under `CI=true`)."""
    busybox_image(tmp_path_factory)


def test_the_first_sandbox_page_shows_the_sandbox_example_as_it_is() -> None:
    """The guide's busybox dataset is examples/sandbox: every file of the example is on the
    page, with the same bytes, and the page shows no file the example lacks."""
    shown = {
        path.removeprefix("sandbox/"): body
        for path, body in page_files(PAGE.read_text()).items()
        if path.startswith("sandbox/")
    }
    assert shown == example_files()


def test_the_sandbox_examples_yaml_matches_the_schemas() -> None:
    """examples/sandbox's manifest and task files pass the published schemas."""
    for path in sorted(EXAMPLE.glob("*.yaml")):
        kind = "manifest" if path.name == "agenteval.yaml" else "task"
        assert schema_problems(kind, yaml.safe_load(path.read_text())) == [], path


@pytest.mark.slow
def test_the_sandbox_example_runs_as_its_readme_says(docker_answers: None, tmp_path: Path) -> None:
    """In a copy of a clone's files (the example, the project's pytest configuration), the
    README's commands build the image FROM scratch, run both agents in containers and show
    the artifacts, each printing what the README shows."""
    shutil.copytree(
        EXAMPLE,
        tmp_path / "examples/sandbox",
        ignore=shutil.ignore_patterns("busybox", "__pycache__", ".pytest_cache"),
    )
    for name in ("pyproject.toml", "conftest.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "tests").mkdir()  # the configuration's testpaths
    run_as_shown((EXAMPLE / "README.md").read_text(), tmp_path)


@pytest.mark.slow
def test_the_first_sandbox_page_runs_as_written(docker_answers: None, tmp_path: Path) -> None:
    """The guide's files, written into an empty folder, and its commands: the busybox image
    and the one of this machine's Python are built, both datasets' command and Python agents
    work in their containers, their graders pass there, and each command prints what the
    page shows."""
    text = PAGE.read_text()
    for path, body in page_files(text).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    run_as_shown(text, tmp_path)


GUIDE = ROOT / "docs" / "guides" / "sandboxes.md"


def _passes(dataset: str, cwd: Path) -> None:
    said = printed(f"pytest --agenteval {dataset} -p no:cacheprovider", cwd)
    assert re.search(r"^2 passed, 0 failed, 0 errors", said, re.M), said


@pytest.mark.slow
def test_the_sandbox_guides_examples_run_in_the_images_they_show(
    docker_answers: None, tmp_path: Path
) -> None:
    """The sandboxes guide's manifest with every option (the first sandbox page's `calc`, as
    uid 1000 with two CPUs) runs both tasks in its Python image, and its artifacts defaults
    run the busybox dataset: every YAML block of the guide is one of these."""
    for path, body in page_files(PAGE.read_text()).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(body)
    shutil.copy("/bin/busybox", tmp_path / "sandbox/image/busybox")
    printed("python3 calc/python-image/fill.py", tmp_path)
    (full, artifacts) = page_files(GUIDE.read_text()).values()
    (tmp_path / "calc/agenteval.yaml").write_text(full)
    _passes("calc", tmp_path)
    manifest = yaml.safe_load((tmp_path / "sandbox/agenteval.yaml").read_text())
    manifest["defaults"].update(yaml.safe_load(artifacts)["defaults"])
    (tmp_path / "sandbox/agenteval.yaml").write_text(yaml.safe_dump(manifest))
    _passes("sandbox", tmp_path)
