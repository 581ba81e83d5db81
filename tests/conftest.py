"""Fixtures for the end-to-end tests."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Import the plugin's modules (and PyYAML's C extension) once, before any pytester inline run:
# inline runs drop modules imported during the run, and libyaml cannot be imported twice.
import pytest_agenteval.glue.controller  # noqa: F401
from chat_server import ChatServer
from helpers import DatasetMaker
from model_server import ModelServer

# Where the environment sets PYTHONDONTWRITEBYTECODE (this machine does), every pytest the tests
# start (pytester subprocesses, their xdist workers, the CLI) would compile pytest's, pydantic's
# and the plugin's modules from source again: 1-2 s of CPU each. They cache bytecode, as a user's
# Python does by default.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` starts one worker more than there are cores: most of a test here waits on a
    child process (pytester subprocesses, agents, Docker), so two workers left a 2-core machine
    a third idle (the default run: 3:03 with 2 workers, 2:22 with 3, 2:32 with 4)."""
    return (os.cpu_count() or 1) + 1


@pytest.fixture
def dataset(pytester: pytest.Pytester) -> DatasetMaker:
    """Writes datasets into pytester's directory (which becomes the rootdir).

    Each file the loader accepts must also pass the published JSON Schemas.
    """
    # Imported here, not at the top: pytest loads this conftest for the README's example-suite
    # command too (it loads `test*/conftest.py` below the rootdir), before the test extra
    # (jsonschema) is installed.
    from written import check_dataset

    return DatasetMaker(pytester.path, check=check_dataset)


@pytest.fixture(autouse=True)
def _lean_inner_runs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs skip hypothesis's plugin: each would re-import and re-rewrite it.

    Set after pytester's own setup, which clears PYTEST_ADDOPTS.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
        monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest")


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A real OpenAI-compatible chat server on 127.0.0.1, scripted through `.script`."""
    server = ChatServer().start()
    yield server
    server.stop()


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A real model API on 127.0.0.1 (OpenAI and Anthropic wire formats), scripted."""
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def own_slots(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine folder (sandbox slot files, build locks) of the test's own, for this process
    and the runs it starts: a test that counts containers under a cap shares its slots with
    no other test running beside it."""
    folder = tmp_path_factory.mktemp("machine")
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    from pytest_agenteval.execution.sandboxes import machine_folder

    return machine_folder()
