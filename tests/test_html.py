"""The HTML report: written by the session and by `agenteval report --html`, loaded in a real
headless Chromium (JavaScript on), hostile agent outputs shown as text and never run.

Screenshots are kept as artifacts in each test's tmp dir (`report.png`, `hostile.png`, below
`pytest-of-<user>/pytest-<N>/<test name>0/`).
"""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from browser import Browser, needs_chromium
from helpers import DatasetMaker, aid, latest_run, task
from pytest_agenteval.cli import main
from pytest_agenteval.reporting.html import TEXT_LIMIT, render_html, script_json
from pytest_agenteval.reporting.summary import build_summary
from pytest_agenteval.store.runs import IndexRow, RunInfo
from test_judge import CALL_COST
from test_show import judged_run  # noqa: F401 (a fixture)

KNOWN = {
    "always.yaml": task(metadata={"answers": ["ok"]}, tags=["easy"]),
    "once.yaml": task(metadata={"answers": ["ok", "no", "no"]}, tags=["easy", "hard"]),
    "never.yaml": task(metadata={"answers": ["no"]}, tags=["hard"]),
    "crash.yaml": task(metadata={"raise": "down"}, tags=["hard"]),
}

PAYLOAD = (
    "<script>document.title='pwned'</script></script>"
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','1')\"><!-- \u2028"
    "\x00\x01\x1b[31m\x7f"
)
HOSTILE_AGENT = f"""
def run(task):
    return {PAYLOAD!r} + "A" * 2_000_000
"""


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    return Browser(tmp_path / "chromium-profile")


def page_data(page: Path) -> dict[str, Any]:
    """The JSON the page embeds, as its script reads it."""
    text = page.read_text()
    match = re.search(r'<script type="application/json" id="agenteval-data">(.*?)</script>', text)
    assert match, "no data block"
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def text_of(dom: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</', dom, re.S)
    assert match, f"no #{element_id}"
    return unescape(match.group(1))


@needs_chromium
def test_report_renders_in_chromium(
    pytester: pytest.Pytester, dataset: DatasetMaker, browser: Browser, tmp_path: Path
) -> None:
    """The session's report loads with JavaScript on and no console message: headline metrics,
    three SVG plots with per-k task counts, the task table and one task's attempts."""
    root = dataset(KNOWN)
    (root / "broken.yaml").write_text("input: q\nexpected: ok\nbogus: 1\n")
    result = pytester.runpytest(
        "--agenteval", "ds", "--attempts", "3", "--agenteval-html", "r.html"
    )
    result.assert_outcomes(passed=4, failed=5, errors=4)
    page = pytester.path / "r.html"
    result.stdout.fnmatch_lines([f"written: *{page}*"])
    dom, console = browser.dom(page, "#task=once")
    browser.screenshot(page, tmp_path / "report.png", "#task=once")
    assert console == []
    assert text_of(dom, "run-id") == latest_run(pytester.path)
    assert text_of(dom, "run-status") == "complete"
    assert text_of(dom, "pass-at-1") == "0.333"
    assert "95% CI" in dom and "mean ± t·SE over 4 tasks" in dom
    assert dom.count("<svg") == 3
    assert "pass@k and pass^k" in dom and "4 tasks" in dom
    assert len(re.findall(r'<tr class="task', dom)) == 4
    assert "showing 4 of 4 tasks" in dom
    drill = dom[dom.index('class="drill-row"') :]
    assert drill.count('class="attempt"') == 3
    assert "equals" in drill and "expected 'ok', got 'no'" in unescape(drill)
    assert "broken.yaml:3: at bogus" in dom  # the load error, with file:line
    assert "data-rendered-ms" in dom


@needs_chromium
def test_hostile_output_is_shown_as_text_and_never_runs(
    pytester: pytest.Pytester, dataset: DatasetMaker, browser: Browser, tmp_path: Path
) -> None:
    """Markup, `</script>`, `<!--`, control characters and 2 MB of output neither break the
    page nor execute: the text shows literally, cut to its first characters with its length."""
    root = dataset({"evil.yaml": task(tags=["x"])})
    (root / "agent.py").write_text(HOSTILE_AGENT)
    (root / "bad.yaml").write_text("input: q\n'<img src=x onerror=alert(1)>': 1\n")
    pytester.runpytest("--agenteval", "ds", "--attempts", "1", "--agenteval-html", "r.html")
    page = pytester.path / "r.html"
    assert page.stat().st_size < 200_000  # the 2 MB are not in the page
    dom, console = browser.dom(page, "#task=evil")
    browser.screenshot(page, tmp_path / "hostile.png", "#task=evil")
    assert console == []
    title = re.search(r"<title>.*?</title>", dom)
    body = re.search(r"<body[^>]*>", dom)
    assert title is not None and body is not None
    assert "<title>agenteval ds 1" in dom and "pwned" not in title[0]
    assert "pwned" not in body[0]  # the onerror marker
    assert "<img src=x" not in dom  # never an element, only escaped text
    output = re.search(r'<div class="label">output</div><pre>(.*?)</pre>', dom, re.S)
    assert output, "no output block"
    assert unescape(output.group(1)).startswith(PAYLOAD.replace("\x00", "\ufffd")[:60])
    assert f"showing the first {TEXT_LIMIT} of 2,000," in dom
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom  # the load error's field, escaped


def test_script_json_cannot_leave_its_element() -> None:
    """The embedded JSON holds no `<`, `>` or `&` and no raw line separator, yet reads back
    as the same data."""
    value = {"o": "</script><!--<script>&amp;\u2028\u2029"}
    text = script_json(value)
    assert not set("<>&\u2028\u2029") & set(text)
    assert json.loads(text) == value


def test_uneven_run_shows_tasks_behind_each_k() -> None:
    """After an uneven run the pass@k plot names how many tasks stand behind each k, and a task
    with fewer attempts than the table's k shows no pass@k rather than its own largest."""
    attempts = {"a": ["pass", "fail", "fail"], "b": ["fail"]}
    rows = [
        IndexRow(aid("ds", t, i), "", "", s, 1.0, 0.5, None, None, None, (), "", None, "")
        for t, statuses in attempts.items()
        for i, s in enumerate(statuses)
    ]
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], {}, 0.0, 0.0, 4, 4, "complete", [])
    page = render_html(build_summary(run, rows, ks=None, session_counts={}, status="complete"), {})
    plot = page[page.index("pass@k and pass^k") : page.index("</svg>")]
    assert [n for n in re.findall(r">(\d+) tasks<", plot)] == ["2", "1", "1"]
    embedded = re.search(r'id="agenteval-data">(.*?)</script>', page)
    assert embedded is not None
    data = json.loads(embedded.group(1))
    tasks = {t["id"]: t for t in data["tasks"]}
    assert data["k"] == 3 and tasks["a"]["pk"] == 1.0 and tasks["b"]["pk"] is None
    assert '<th data-key="pk" class="num" aria-sort="none" tabindex="0">pass@3</th>' in page


def test_headline_fingerprint_is_readable_and_no_tags_is_said() -> None:
    """The agent fingerprint reads as `part: value` pairs (no JSON inside JSON, no nulls), and
    a run without tags says so instead of drawing an empty axis."""
    rows = [
        IndexRow(aid("ds", "a", 0), "", "", "pass", 1.0, 0.5, None, None, None, (), "", None, "")
    ]
    agent = {"manifest": {"ds": 'openai:{"model": "m"}'}, "override": None, "version": None}
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], agent, 0.0, 0.0, 1, 1, "complete", [])
    page = render_html(build_summary(run, rows, ks=None, session_counts={}, status="complete"), {})
    fingerprint = re.search(r'class="meta fingerprint">(.*?)</p>', page)
    assert fingerprint is not None
    assert (
        unescape(fingerprint.group(1))
        == 'agent fingerprint <code>manifest: ds = openai:{"model": "m"}</code>'
    )
    assert "no task has tags" in page and "pass@1 (mean over the tag" not in page
    assert "not loaded" not in page
    broken = [{"dataset": "ds", "label": "b", "path": "b.yaml", "message": "b.yaml:1: bad"}]
    summary = build_summary(
        run, rows, ks=None, session_counts={}, status="complete", load_errors=broken
    )
    page = render_html(summary, {})
    assert '<dd>1 <span class="not-loaded">+ 1 not loaded</span></dd>' in page


def test_agenteval_report_html_for_a_stored_run(
    pytester: pytest.Pytester, dataset: DatasetMaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agenteval report RUN --html FILE` writes the report of a stored run, with every
    attempt's output, usage and grader verdicts, and no other file unless --out is given."""
    dataset(KNOWN)
    pytester.runpytest("--agenteval", "ds", "--attempts", "2")
    run_id = latest_run(pytester.path)
    monkeypatch.chdir(pytester.path)
    (pytester.path / "pytest.ini").write_text("[pytest]\n")
    summary = pytester.path / f".pytest_cache/agenteval/runs/{run_id}/summary.json"
    summary.unlink()
    assert main(["report", run_id, "--html", "out/report.html"]) == 0
    assert not summary.exists()
    data = page_data(pytester.path / "out/report.html")
    tasks = {t["id"]: t for t in data["tasks"]}
    assert (tasks["once"]["n"], tasks["once"]["c"], tasks["once"]["e"]) == (2, 1, 0)
    attempt = tasks["once"]["a"][1]
    assert (attempt["s"], attempt["o"]) == ("fail", "no")
    assert attempt["v"] == [["equals", False, 0.0, "expected 'ok', got 'no'"]]
    assert (
        tasks["crash"]["a"][0]["e"].startswith("Traceback") or "down" in tasks["crash"]["a"][0]["e"]
    )
    assert data["tags"] == ["easy", "hard"] and data["k"] == 2


def test_resumed_run_flags_reused_and_regraded_attempts(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A resume's report flags the attempts it replayed as reused and those judged again with
    new graders as regraded, and the ini twin `agenteval_html` names the file."""
    root = dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--attempts", "1")
    (root / "b.yaml").write_text(json.dumps(task("ok", expected="ko")))
    pytester.makeini("[pytest]\nagenteval_html = report.html\n")
    pytester.runpytest("--agenteval", "ds", "--attempts", "1", "--resume-suite")
    tasks = {t["id"]: t for t in page_data(pytester.path / "report.html")["tasks"]}
    assert tasks["a"]["a"][0]["f"] == ["reused"]
    assert tasks["b"]["a"][0]["f"] == ["regraded"]
    assert tasks["b"]["a"][0]["s"] == "fail"


def test_interrupted_session_writes_report_with_its_status(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A session stopped early (-x) still writes the report, marked interrupted."""
    dataset(KNOWN)
    pytester.runpytest("--agenteval", "ds", "--attempts", "3", "-x", "--agenteval-html", "r.html")
    text = (pytester.path / "r.html").read_text()
    assert 'id="run-status">interrupted<' in text


@pytest.mark.slow
def test_report_written_once_by_the_xdist_controller(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """Under xdist the controller writes the report from all workers' records."""
    dataset(KNOWN)
    result = pytester.runpytest_subprocess(
        "--agenteval", "ds", "--attempts", "2", "-n", "2", "--agenteval-html", "r.html"
    )
    result.assert_outcomes(passed=3, failed=3, errors=2)
    data = page_data(pytester.path / "r.html")
    assert sorted(t["id"] for t in data["tasks"]) == ["always", "crash", "never", "once"]
    assert sum(len(t["a"]) for t in data["tasks"]) == 8
    assert not list(pytester.path.glob(".r.html.*.tmp"))


DRIVER = """<script>
(function () {
  var out = {};
  function ids() {
    return Array.from(document.querySelectorAll("#task-table tr.task")).map(function (tr) {
      return tr.dataset.task;
    });
  }
  function set(id, value, event) {
    var node = document.getElementById(id);
    node.value = value;
    node.dispatchEvent(new Event(event));
  }
  out.first = ids().length;
  document.getElementById("more").click();
  out.more = ids().length;
  var head = document.querySelector('th[data-key="p1"]');
  head.click();
  out.descending = ids().slice(0, 3);
  head.click();
  out.ascending = ids().slice(0, 3);
  set("filter-tag", "hard", "change");
  out.hard = ids().length;
  set("filter-tag", "", "change");
  set("filter-status", "none", "change");
  out.none = ids().length;
  set("filter-status", "", "change");
  set("filter-text", "t22", "input");
  setTimeout(function () {
    out.text = ids();
    set("filter-text", "got 'no'", "input");
    setTimeout(function () {
      out.reason = ids().length;
      out.label = document.getElementById("shown-count").textContent;
      var pre = document.createElement("pre");
      pre.id = "driver";
      pre.textContent = JSON.stringify(out);
      document.body.appendChild(pre);
    }, 400);
  }, 400);
})();
</script>"""


@needs_chromium
def test_table_pages_sorts_and_filters_in_chromium(
    pytester: pytest.Pytester, dataset: DatasetMaker, browser: Browser
) -> None:
    """The table draws 200 rows at a time, sorts by a clicked header (twice: the other way)
    and filters by tag, status and text (task id or failure reason)."""
    many = [
        {
            "id": f"t{i:03}",
            **task("ok" if i % 3 else "no", tags=["hard" if i % 10 == 0 else "easy"]),
        }
        for i in range(230)
    ]
    dataset({"many.yaml": {"tasks": many}})
    pytester.runpytest("--agenteval", "ds", "--agenteval-html", "r.html")
    page = pytester.path / "r.html"
    # The test's driver script runs after the page's own; the page's policy would block it.
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    driven = pytester.path / "driven.html"
    driven.write_text(text.replace("</body>", DRIVER + "</body>"))
    dom, console = browser.dom(driven, "", "--virtual-time-budget=5000")  # its timers fire
    assert console == []
    result = json.loads(text_of(dom, "driver"))
    assert (result["first"], result["more"]) == (200, 230)
    assert result["descending"] == ["t001", "t002", "t004"]
    assert result["ascending"] == ["t000", "t003", "t006"]
    assert (result["hard"], result["none"], result["reason"]) == (23, 77, 77)
    assert sorted(result["text"]) == [f"t22{i}" for i in range(10)]  # still sorted by pass@1
    assert result["label"] == "showing 77 of 77 tasks (230 in the run)"


def test_unwritable_report_is_one_line_and_exit_2(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """A report that cannot be written is one line naming the path and the errno (exit 2);
    every attempt stays recorded."""
    dataset({"a.yaml": task("ok")})
    (pytester.path / "taken").write_text("a file, not a folder")
    result = pytester.runpytest("--agenteval", "ds", "--agenteval-html", "taken/r.html")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["agenteval: cannot write *taken/r.html: *Errno 20*"])
    assert "Traceback" not in result.stdout.str()
    run = pytester.path / ".pytest_cache/agenteval/runs" / latest_run(pytester.path)
    assert len((run / "index.jsonl").read_text().splitlines()) == 1


SHOW_ALL = """<script>
(function () {
  var input = document.querySelector(".attempt pre.foldable");
  var out = {before: input.textContent.length};
  document.querySelector(".attempt .show-all").click();
  out.after = input.textContent.length;
  out.label = document.querySelector(".attempt .show-all").textContent;
  var node = document.createElement("pre");
  node.id = "driver";
  node.textContent = JSON.stringify(out);
  document.body.appendChild(node);
})();
</script>"""


@needs_chromium
@pytest.mark.usefixtures("judged_run")
def test_drill_down_shows_input_expected_judge_and_cost_in_chromium(
    pytester: pytest.Pytester, browser: Browser, tmp_path: Path
) -> None:
    """An attempt shows its input (first characters, "show all" reveals the rest), `expected`,
    every grader's reason, the judge's threshold, model, cost, prompt and raw reply, and its
    cost as agent + judge; the table's cost is agent + judge too."""
    page = pytester.path / "r.html"
    dom, console = browser.dom(page, "#task=t")
    browser.screenshot(page, tmp_path / "judged.png", "#task=t")
    assert console == []
    drill = unescape(dom[dom.index('class="drill-row"') :])
    assert '<div class="label">input</div><pre class="foldable">' + "Q" * 400 + "…</pre>" in drill
    assert '<div class="label">expected</div><pre class="foldable">ok</pre>' in drill
    assert ": score 0.9 (&gt;= 0.5): right" in dom and "contains 'ok'" in drill
    assert "threshold 0.5 · model served-model-1 · cost 0.0006" in drill
    assert '<div class="label">judge prompt</div>' in drill and "You are a strict" in drill
    assert '<div class="label">judge reply</div>' in drill
    assert '{"score": 0.9, "reason": "right"}' in drill
    total = f"{0.25 + CALL_COST:.4f}"
    assert f"{total} (agent 0.2500, judge 0.0006)" in drill
    row = dom[dom.index('<tr class="task') : dom.index('class="drill-row"')]
    assert f'<td class="num">{total}</td>' in row
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    driven = pytester.path / "driven.html"
    driven.write_text(text.replace("</body>", SHOW_ALL + "</body>"))
    dom, console = browser.dom(driven, "#task=t")
    assert console == []
    assert json.loads(text_of(dom, "driver")) == {
        "before": 401,
        "after": 1500,
        "label": "show less",
    }


@needs_chromium
def test_a_malformed_task_link_is_ignored_in_chromium(
    pytester: pytest.Pytester, dataset: DatasetMaker, browser: Browser
) -> None:
    """`report.html#task=%E0%A4%A` (not valid percent-encoding) opens nothing and throws
    nothing: the console stays empty and the table is drawn."""
    dataset({"t.yaml": task(metadata={"answers": ["ok"]})})
    pytester.runpytest("--agenteval", "ds", "--agenteval-html", "r.html")
    dom, console = browser.dom(pytester.path / "r.html", "#task=%E0%A4%A")
    assert console == []
    assert "showing 1 of 1 tasks" in dom and 'class="drill-row"' not in dom


@needs_chromium
def test_a_one_attempt_run_has_one_pass_at_1_column_in_chromium(
    pytester: pytest.Pytester, dataset: DatasetMaker, browser: Browser
) -> None:
    """In a run of one attempt per task the table has one `pass@1` column (pass@k at k = 1 is
    the same number), each row a cell per column, and `#task=ID` opens that task's attempts."""
    dataset({"t.yaml": task(metadata={"answers": ["ok"]}), "u.yaml": task("no")})
    pytester.runpytest("--agenteval", "ds", "--agenteval-html", "r.html")
    dom, console = browser.dom(pytester.path / "r.html", "#task=t")
    assert console == []
    table = dom[dom.index('<table id="task-table">') :]
    heads = re.findall(r"<th [^>]*>([^<]*)</th>", table[: table.index("</thead>")])
    assert heads == ["task", "n", "passed", "errors", "pass@1", "cost", "p50 duration"]
    rows = re.findall(r'<tr class="task[^"]*"[^>]*>(.*?)</tr>', table, re.S)
    assert len(rows) == 2 and all(row.count("<td") == len(heads) for row in rows)
    assert re.search(r'<td class="drill" colspan="7">', table)
