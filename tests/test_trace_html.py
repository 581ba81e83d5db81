"""The HTML drill-down shows an attempt's typed trace as a timeline, in headless Chromium:
each model turn, each tool call with its command and output (folded past a few lines, a
button shows all), messages, and the attempt's timings."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from browser import Browser, needs_chromium
from helpers import DatasetMaker
from test_html import page_data, text_of
from test_traces import loop_dataset

SHOW_ALL = """<script>
(function () {
  var body = document.querySelectorAll(".ev-tool_call pre.ev-body")[1];
  var out = {before: body.textContent.split("\\n").length};
  var button = document.querySelectorAll(".ev-tool_call .show-all")[1];
  button.click();
  out.after = body.textContent.split("\\n").length;
  out.label = button.textContent;
  var node = document.createElement("pre");
  node.id = "driver";
  node.textContent = JSON.stringify(out);
  document.body.appendChild(node);
})();
</script>"""


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    return Browser(tmp_path / "chromium-profile")


@needs_chromium
def test_the_drill_down_shows_the_trace_as_a_timeline_in_chromium(
    pytester: pytest.Pytester, dataset: DatasetMaker, browser: Browser, tmp_path: Path
) -> None:
    """Twelve events in order: model turns in bold, tool calls with their command, exit
    status and output folded to six lines (the button shows all twelve), messages with the
    tool calls they ask for; the timings line names the agent and the grader."""
    loop_dataset(dataset, {"t.yaml": {"input": "q", "expected": "done", "metadata": {"lines": 12}}})
    pytester.runpytest("--agenteval", "ds", "--agenteval-html", "r.html").assert_outcomes(passed=1)
    page = pytester.path / "r.html"
    view = page_data(page)["tasks"][0]["a"][0]
    assert (view["tr"]["turns"] == 3 and view["tr"]["tools"] == 3 and "t" not in view) or not view[
        "t"
    ]
    dom, console = browser.dom(page, "#task=t")
    browser.screenshot(page, tmp_path / "timeline.png", "#task=t")
    assert console == []
    drill = unescape(dom[dom.index('class="drill-row"') :])
    assert "trace (3 model turns, 3 tool calls)" in drill
    kinds = re.findall(r'<li class="ev ev-(\w+)">', drill)
    assert kinds == ["model_call", "message", "tool_call", "tool_result"] * 3
    assert (
        '<div class="ev-head">model call m1 (100 in / 10 out, 0.00s, finish tool_calls)</div>'
        in drill
    )
    assert '<div class="ev-head">tool bash {"cmd": "pytest -q"} → exit 1 (' in drill
    folded = "\n".join(f"line {i}" for i in range(6)) + "\n…"
    assert f'<pre class="ev-body">{folded}</pre>' in drill
    assert drill.count(">show all 12 lines</button>") == 3
    assert '→ {"bash": "pytest -q"}' in drill  # the tool call the assistant asked for
    assert '<div class="label">timings</div>' in drill and "agent " in drill and "equals " in drill
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    driven = pytester.path / "driven.html"
    driven.write_text(text.replace("</body>", SHOW_ALL + "</body>"))
    dom, console = browser.dom(driven, "#task=t")
    assert console == []
    assert json.loads(text_of(dom, "driver")) == {"before": 7, "after": 12, "label": "show less"}
