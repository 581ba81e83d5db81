"""What an agent wrote, as the plugin prints it: control characters escaped (no escape
sequence of an agent's reaches the terminal), and an agent's traceback of its own frames."""

from __future__ import annotations

import pytest

from helpers import WORKERS, DatasetMaker, latest_run, task
from pytest_agenteval.cli import main

SEQUENCE = "\x1b]0;T\x07\x1b[2J"
"""Sets the terminal's title and clears its screen."""
SHOWN = "\\x1b]0;T\\x07\\x1b[2J"
SHOWN_LINE = SHOWN.replace("[", "[[]")  # as an fnmatch pattern

AGENT = f"""
import sys

SEQUENCE = {SEQUENCE!r}


def run(task):
    print("agent says " + SEQUENCE)
    if task.id == "boom":
        raise RuntimeError("boom " + SEQUENCE)
    (task.workspace / (SEQUENCE + ".txt")).write_text("x")
    return SEQUENCE + "\\rcovered"


def wrong(output):
    return False, "judged " + SEQUENCE
"""


def test_printable_escapes_control_characters_and_keeps_lines() -> None:
    """C0 and C1 controls, DEL, carriage returns and lone surrogates become escapes; newlines,
    tabs and other text stay as they are, and text without any comes back as it was."""
    from pytest_agenteval.core.text import printable

    assert printable(f"a{SEQUENCE}\tb\nc\r\x9b\x7f\udcff é") == (
        f"a{SHOWN}\tb\nc\\x0d\\x9b\\x7f\\udcff é"
    )
    text = "plain\ttext\nover lines, ünïcode"
    assert printable(text) is text


@pytest.mark.parametrize("workers", WORKERS)
def test_no_escape_sequence_of_an_agent_reaches_the_terminal(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    workers: list[str],
) -> None:
    """An agent's exception message, a grader's reason, what the agent printed (pytest -rA's
    captured output), the short summary, and `agenteval show`'s output, error and file names
    print an agent's escape sequence escaped, also from xdist workers."""
    root = dataset(
        {
            "boom.yaml": task(),
            "said.yaml": task(graders=[{"python": "agent:wrong"}], artifacts={}, workspace="ws"),
        }
    )
    (root / "ws").mkdir()
    (root / "agent.py").write_text(AGENT)
    result = pytester.runpytest_subprocess("--agenteval", "ds", "-rA", *workers)
    result.assert_outcomes(failed=1, errors=1)
    out = result.stdout.str()
    assert "\x1b" not in out and "\x07" not in out
    result.stdout.fnmatch_lines_random(
        [
            f"E *RuntimeError: boom {SHOWN_LINE}",
            f"*[[]FAIL[]] agent:wrong: judged {SHOWN_LINE}",
            f"FAILED ds/said.yaml::said[[]attempt-0[]] - agent:wrong: judged {SHOWN_LINE}",
            "ERROR ds/boom.yaml::boom[[]attempt-0[]] - agent call: RuntimeError: boom \\x1b*",
            f"agent says {SHOWN_LINE}",
        ]
    )
    store = ["--cache-dir", str(pytester.path / ".pytest_cache")]
    run = latest_run(pytester.path)
    capsys.readouterr()
    assert main(["show", run, "said/0", *store]) == 0
    assert main(["show", run, "boom/0", *store]) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "\r" not in shown
    assert f"output:\n  {SHOWN}\n  covered\n" in shown  # a carriage return starts a line
    assert f"  added             1 B  {SHOWN}.txt\n" in shown  # an artifact's name
    assert 'RuntimeError("boom " + SEQUENCE)' in shown and f"RuntimeError: boom {SHOWN}" in shown


FROZEN = """
from pytest_agenteval import AgentResult


def run(task):
    result = AgentResult(output="draft")
    result.output = "final"
    return result
"""


@pytest.mark.parametrize("workers", WORKERS)
def test_a_frozen_agent_result_changed_shows_the_agents_frames_only(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    workers: list[str],
) -> None:
    """An agent that sets a field of its (frozen) AgentResult errors with its own line and
    pydantic's message, without pydantic's frames (past the agent's last frame), in the
    terminal and in the stored error `agenteval show` prints."""
    root = dataset({"a.yaml": task(), "b.yaml": task()})
    (root / "agent.py").write_text(FROZEN)
    result = pytester.runpytest_subprocess("--agenteval", "ds", *workers)
    result.assert_outcomes(errors=2)
    errors = result.stdout.str().split("= ERRORS =")[1].split("= agenteval =")[0]
    assert "pydantic/" not in errors and "_setattr_handler" not in errors
    assert errors.count('>       result.output = "final"') == 2
    assert errors.count("Instance is frozen [type=frozen_instance") == 2
    assert len(errors.splitlines()) < 2 * 20  # was ~75 lines of pydantic per attempt
    capsys.readouterr()
    store = ["--cache-dir", str(pytester.path / ".pytest_cache")]
    assert main(["show", latest_run(pytester.path), "a/0", *store]) == 0
    shown = capsys.readouterr().out
    assert "pydantic/main.py" not in shown and 'result.output = "final"' in shown
    assert "Instance is frozen" in shown


def test_money_below_a_cent_never_reads_as_nothing() -> None:
    """A cap or a spend below a cent keeps the digits that say it (`$0.003`, not `$0.00`);
    a dollar or more, and nothing, keep two decimals."""
    from pytest_agenteval.core.text import dollars

    said = [dollars(x) for x in (0, 0.003, 0.015, 0.5, 1.5, 4, 0.00001)]
    assert said == ["$0.00", "$0.003", "$0.015", "$0.50", "$1.50", "$4.00", "$0.00001"]
