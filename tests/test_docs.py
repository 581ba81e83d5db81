"""The documentation cannot drift: generated references cover everything, the tutorial runs as
written, and the site builds and renders (its YAML examples are checked in test_schemas.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from browser import Browser, needs_chromium

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import agenteval_reference  # noqa: E402

CAPTION = re.compile(r"\A:caption: (\S+)\n\n?")


def test_every_option_command_and_field_is_documented() -> None:
    """Each pytest option, `agenteval` command and argument, and schema field has a description
    (the reference pages are generated from them)."""
    assert agenteval_reference.missing_docs() == []


def test_reference_pages_hold_every_option_and_command() -> None:
    """The generated option and command references name every option and subcommand."""
    options = agenteval_reference.options_markdown()
    for option in agenteval_reference.plugin_options():
        assert f"`{option.names[0]}" in options
    commands = agenteval_reference.commands_markdown()
    for name, _, _ in agenteval_reference.commands():
        assert f"## `agenteval {name}`" in commands


def tutorial() -> tuple[dict[str, str], list[tuple[str, int]]]:
    """The tutorial's files (by caption) and its commands with the exit status each expects."""
    return worked_example(DOCS / "getting-started" / "first-dataset.md")


def worked_example(page: Path) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """A page's files (its code blocks with a caption naming their path) and its console
    commands with the exit status each expects (`# exits N`, else 0)."""
    text = page.read_text()
    files: dict[str, str] = {}
    commands: list[tuple[str, int]] = []
    for match in re.finditer(r"^```(\{code-block\} \w+|console)\n(.*?)^```", text, re.S | re.M):
        if match[1] == "console":
            for line in match[2].splitlines():
                command, _, comment = line.removeprefix("$ ").partition("#")
                expected = re.search(r"exits (\d+)", comment)
                commands.append((command.strip(), int(expected[1]) if expected else 0))
        else:
            caption = CAPTION.match(match[2])
            assert caption, "every tutorial file has a :caption: naming its path"
            files[caption[1]] = CAPTION.sub("", match[2])
    return files, commands


@pytest.mark.slow
def test_tutorial_runs_as_written(tmp_path: Path) -> None:
    """The five-minute tutorial's files and commands work in an empty folder, each command
    with the exit status the page says."""
    files, commands = tutorial()
    assert files and commands
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    said = {}
    for command, expected in commands:
        done = subprocess.run(
            shlex.split(command), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == expected, f"$ {command}\n{done.stdout}\n{done.stderr}"
        said[command] = done.stdout
    # What the page says each command shows.
    assert "6 passed, 3 failed" in said["pytest --agenteval my_evals"]
    # The README's worked example shows this dataset's counts line as the terminal prints it.
    readme = (ROOT / "README.md").read_text()
    (counts,) = re.findall(r"^6 passed, 3 failed.*$", readme, re.M)
    assert counts in said["pytest --agenteval my_evals"].splitlines()
    assert "I don't know" in said["agenteval show latest geo/hard/0"]
    assert "0 errors; 9 reused; 0 run now" in said["pytest --agenteval my_evals --resume-suite"]


def test_the_graders_guide_example_runs_as_written(pytester: pytest.Pytester) -> None:
    """The graders guide's plugin grader (a conftest returning `Verdict(...)`) and its dataset
    run as written: the command exits as the page says, with the failure line it shows; the
    `Verdict(...)` the page spells out has the real constructor's parameters, in order."""
    page = DOCS / "guides" / "graders.md"
    files, commands = worked_example(page)
    assert set(files) >= {"conftest.py", "answers/agenteval.yaml"}
    for name, content in files.items():
        (pytester.path / name).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / name).write_text(content)
    ((command, expected),) = commands
    argv = shlex.split(command)
    assert argv[0] == "pytest"
    result = pytester.runpytest(*argv[1:])
    assert result.ret == expected
    result.assert_outcomes(passed=1, failed=1)
    text = page.read_text()
    (shown,) = re.findall(r"fails with `(\[FAIL\] [^`]+)`", text)
    result.stdout.fnmatch_lines([f"  {shown}"])
    from dataclasses import fields

    from pytest_agenteval import Verdict

    (spelled,) = re.findall(r"`Verdict\((grader=[^`]*)\)`:", text)
    assert [part.split("=")[0] for part in spelled.split(", ")] == [f.name for f in fields(Verdict)]


PLAIN_ON = re.compile(r"(?<![\w\"'-])on:")
"""A plain `on:` key, which YAML 1.1 reads as the boolean True (not `runs-on:`, not `"on":`)."""


def test_every_plain_on_key_in_the_docs_validates_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every YAML example of the docs and the README with a plain `on:` key (the graders
    guide's `judge: {..., on: trajectory}`) passes `agenteval validate` as written (a
    `graders:` excerpt as a task file's)."""
    from pytest_agenteval.cli import main

    fence = re.compile(
        r"^```(?:yaml|\{code-block\} yaml)\n(?::caption:[^\n]*\n)?(.*?)^```", re.S | re.M
    )
    pages = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
    blocks = [
        (page.name, block)
        for page in pages
        for block in fence.findall(page.read_text())
        if PLAIN_ON.search(block)
    ]
    assert any(name == "graders.md" for name, _ in blocks)
    for i, (name, block) in enumerate(blocks):
        root = tmp_path / f"ds{i}"
        root.mkdir()
        (root / "agenteval.yaml").write_text(
            "name: ds\nagent: agent:run\njudge: {model: m, base_url: http://127.0.0.1:9/v1}\n"
        )
        task = block if re.search(r"^input:", block, re.M) else "input: q\n" + block
        (root / "t.yaml").write_text(task)
        (root / "agent.py").write_text("def run(task):\n    return 'ok'\n")
        status = main(["validate", str(root)])
        assert status == 0, (name, block, capsys.readouterr().out)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built the way `.ci/run` builds it: warnings are errors."""
    pytest.importorskip("sphinx")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", DOCS, out],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.slow
@needs_chromium
def test_site_pages_render_with_content_and_no_console_errors(site: Path, tmp_path: Path) -> None:
    """The built index and a generated reference page load in Chromium with their content."""
    browser = Browser(tmp_path / "profile")
    dom, console = browser.dom(site / "index.html")
    assert console == [] and "Your first dataset in five minutes" in dom
    dom, console = browser.dom(site / "reference" / "options.html")
    assert console == [] and "--agenteval-max-cost" in dom and "agenteval_html" in dom


OPTION_LINES = """<script>
(function () {
  var broken = [], names = 0;
  document.querySelectorAll("table tbody td:first-child code").forEach(function (code) {
    names += 1;
    if (code.getClientRects().length > 1) broken.push(code.textContent);
  });
  var node = document.createElement("pre");
  node.id = "driver";
  node.textContent = JSON.stringify({names: names, broken: broken});
  document.body.appendChild(node);
})();
</script>"""


@pytest.mark.slow
@needs_chromium
def test_options_reference_keeps_each_option_name_on_one_line(site: Path, tmp_path: Path) -> None:
    """In the built options reference, seen in Chromium's default (narrow) window, no option
    name with its value (`--agenteval-agent REF`) is broken across lines."""
    page = site / "reference" / "options.html"
    driven = page.with_name("options-driven.html")
    driven.write_text(page.read_text().replace("</body>", OPTION_LINES + "</body>"))
    dom, console = Browser(tmp_path / "profile").dom(driven)
    assert console == []
    driver = re.search(r'id="driver">(.*?)</pre>', dom, re.S)
    assert driver is not None
    found = json.loads(unescape(driver[1]))
    assert found["names"] > 25
    assert found["broken"] == []


@pytest.mark.slow
def test_site_never_turns_an_option_dash_into_a_typographic_dash(site: Path) -> None:
    """Option names in prose (`like --agenteval-max-cost`) keep their two hyphens in the site."""
    pages = [page.read_text() for page in site.rglob("*.html")]
    assert any("--agenteval-max-cost" in page for page in pages)
    assert [page for page in pages if re.search("[\u2013\u2014]agenteval-", page)] == []


@pytest.mark.parametrize("name", ["Environment", "ExecResult", "ChangedFile"])
def test_the_python_api_reference_lists_every_member_of_the_environment_api(name: str) -> None:
    """The reference's entry for each public type of the environment API lists every public
    method, property and field, and each method and property has a docstring: the reference
    renders what `help()` shows, with the same type hints."""
    import pytest_agenteval

    cls = getattr(pytest_agenteval, name)
    page = (DOCS / "reference" / "python-api.md").read_text()
    entry = re.search(rf"autoclass:: pytest_agenteval\.{name}(?:\(\))?\n   :members: (.*)", page)
    assert entry is not None, f"no entry for {name}"
    public = {member for member in vars(cls) if not member.startswith("_")}
    assert set(entry[1].split(", ")) == public
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    undocumented = [m for m in public - fields if not getattr(cls, m).__doc__]
    assert undocumented == []


def _prose(page: str) -> str:
    """A docs page's text with its line breaks as spaces (sentences wrap anywhere)."""
    return " ".join((DOCS / "guides" / page).read_text().split())


def test_concurrency_guide_says_what_a_resume_with_the_same_cap_does() -> None:
    """The concurrency guide says a resume with the same cap runs the calls that still fit
    (a reservation stop leaves room below it), as the code does, not that it starts nothing."""
    text = _prose("concurrency.md")
    assert "with the same cap starts nothing" not in text
    assert "a `--resume-suite` with the same cap runs only the calls that fit in what is" in text
    assert "is left of it. That is nothing once the run spent the whole cap" in text


def test_reports_guide_documents_the_task_link() -> None:
    """The reports guide says what `report.html#task=ID` opens and how ID is written."""
    text = _prose("reports.md")
    assert "**A link to one task.** `report.html#task=ID` opens task ID's attempts" in text
    assert "`report.html#task=math%2Fadd` both work" in text
    assert "`DATASET/ID` names one dataset's task" in text


def test_the_two_limits_blocks_example_validates_and_says_which_is_which(tmp_path: Path) -> None:
    """The providers guide's example of an agent's and a provider's `limits:` passes
    `agenteval validate` as written, each block lands where the page says, and the judges
    and concurrency guides link to that section instead of contradicting it."""
    import yaml

    from pytest_agenteval.core.model import Manifest

    text = (DOCS / "guides" / "providers.md").read_text()
    section = text[text.index("## Agent limits and provider limits") :]
    block = section[section.index("```yaml\n") + 8 : section.index("```\n", 8)]
    root = tmp_path / "ds"
    root.mkdir()
    (root / "agenteval.yaml").write_text(block)
    (root / "bot.py").write_text("def run(task):\n    return task.llm().chat([]).text\n")
    (root / "t.yaml").write_text("input: q\nexpected: ok\ngraders: [{judge: {rubric: ok?}}]\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "validate", str(root)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = Manifest.model_validate(yaml.safe_load(block))
    assert manifest.limits is not None and manifest.limits.max_in_flight == 4
    assert manifest.providers is not None
    assert manifest.providers["local"].limits.max_in_flight == 16
    assert manifest.judge is not None and manifest.judge.provider == "local"
    link = "(providers.md#agent-limits-and-provider-limits)"
    for page in ("models-and-judges.md", "concurrency.md"):
        assert link in (DOCS / "guides" / page).read_text(), page
    judges = _prose("models-and-judges.md")
    assert "is bound by that provider's `limits:`" in judges


def test_agents_guide_says_what_an_official_sdk_agent_gets() -> None:
    """The agents guide says what an agent on the official SDKs gets and does not get today
    (limits, probe, cache, usage, spend caps) and recommends `task.llm()`."""
    text = _prose("agents.md")
    section = text[text.index("## An agent on the official `openai` or `anthropic` SDK") :]
    section = section[: section.index("## Traces")]
    rows = {
        "| an agent's `limits:`": "| yes | yes:",
        "| a provider's `limits:`": "| yes | no:",
        "| the probe": "| yes | no:",
        "| the model cache": "| yes | no:",
        "| usage and cost in the record": "only what the agent reports",
        "| `--agenteval-max-cost` / `--agenteval-max-tokens`": "calls in flight can pass a cap",
    }
    for row, says in rows.items():
        line = section[section.index(row) :].split(" | |")[0]
        assert says in line, row
    assert "So use `task.llm()`" in section
