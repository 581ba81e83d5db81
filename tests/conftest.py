"""Fixtures for the end-to-end tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

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
