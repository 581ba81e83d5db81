"""The HTML report of a run with variants: the leaderboard, every variant's pass@k on one
plot, and the tasks x variants matrix (filtered to disagreements, each cell opening that
variant's attempts), loaded in a real headless Chromium."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from browser import Browser, needs_chromium
from helpers import aid
from pytest_agenteval.reporting.html import attempt_details, render_html, write_html
from pytest_agenteval.reporting.html_variants import matrix_rows
from pytest_agenteval.reporting.runref import stored_run
from pytest_agenteval.reporting.summary import build_summary
from pytest_agenteval.reporting.svg import Series, line_plot
from pytest_agenteval.store.runs import IndexRow, RunInfo
from test_html import page_data, text_of
from variant_runs import variant_summary, write_variant_run

DRIVER = """<script>
(function () {
  var out = {};
  function shown() {
    return Array.from(document.querySelectorAll("#matrix tr.mrow")).map(function (tr) {
      return tr.dataset.task;
    });
  }
  function drill() {
    var row = document.querySelector("#matrix tr.drill-row");
    if (!row) return null;
    return {
      after: row.previousSibling.dataset.task,
      variant: row.dataset.variant,
      head: row.querySelector(".label").textContent,
      attempts: Array.from(row.querySelectorAll(".attempt")).map(function (box) {
        var pres = Array.from(box.querySelectorAll("pre")).map(function (p) {
          return p.textContent;
        });
        return [box.dataset.attempt, box.querySelector(".badge").textContent, pres.join("|")];
      })
    };
  }
  function cell(task, variant) {
    return document.querySelector(
      '#matrix tr.mrow[data-task="' + task + '"] td[data-variant="' + variant + '"]');
  }
  out.all = shown();
  out.cells = Array.from(document.querySelectorAll("#matrix td.cell")).map(function (td) {
    return td.textContent + " " + td.className;
  });
  var box = document.getElementById("filter-disagree");
  box.checked = true;
  box.dispatchEvent(new Event("change"));
  out.disagree = shown();
  out.label = document.getElementById("matrix-count").textContent;
  cell("better", "cand").click();
  out.cand = drill();
  cell("better", "base").click();
  out.base = drill();
  out.rows = document.querySelectorAll("#matrix tr.drill-row").length;
  cell("better", "base").click();
  out.closed = drill();
  box.checked = false;
  box.dispatchEvent(new Event("change"));
  out.again = shown();
  var node = document.createElement("pre");
  node.id = "driver";
  node.textContent = JSON.stringify(out);
  document.body.appendChild(node);
})();
</script>"""


@pytest.fixture
def browser(tmp_path: Path) -> Browser:
    return Browser(tmp_path / "chromium-profile")


@pytest.fixture
def report(tmp_path: Path) -> Path:
    """The report of a run of variants base and cand (and a task with its own agent)."""
    store = write_variant_run(tmp_path / "cache")
    return write_html(variant_summary(store), attempt_details(store, "vr"), tmp_path / "r.html")


@needs_chromium
def test_matrix_filters_disagreements_and_opens_a_variants_attempts_in_chromium(
    report: Path, browser: Browser, tmp_path: Path
) -> None:
    """The matrix shows c/n per task and variant, colored by rate; the filter keeps the tasks
    where the variants disagree; a cell opens that task's attempts of that variant (again:
    closes them); no console message."""
    dom, console = browser.dom(report)
    browser.screenshot(report, tmp_path / "variants.png")
    assert console == []
    assert "showing 3 of 3 tasks" in dom and 'id="leaderboard"' in dom
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", report.read_text())
    driven = tmp_path / "driven.html"
    driven.write_text(text.replace("</body>", DRIVER + "</body>"))
    dom, console = browser.dom(driven)
    assert console == []
    out = json.loads(text_of(dom, "driver"))
    assert out["all"] == out["again"] == ["agree", "better", "worse"]
    assert out["cells"] == [
        "2/2 cell rate-4",
        "2/2 cell rate-4",
        "0/2 cell rate-0",
        "1/2 cell rate-2",
        "1/2 cell rate-2",
        "0/2 cell rate-0",
    ]
    assert out["disagree"] == ["better", "worse"]
    assert out["label"] == "showing 2 of 2 tasks where the variants disagree (3 in all)"
    assert out["cand"]["after"] == "better" and out["cand"]["variant"] == "cand"
    assert out["cand"]["head"] == "variant cand · task better"
    assert [a[:2] for a in out["cand"]["attempts"]] == [["0", "pass"], ["1", "fail"]]
    assert "cand answer 0 of better" in out["cand"]["attempts"][0][2]
    assert out["base"]["variant"] == "base" and out["rows"] == 1
    assert [a[:2] for a in out["base"]["attempts"]] == [["0", "fail"], ["1", "fail"]]
    assert "base answer 1 of better" in out["base"]["attempts"][1][2]
    assert out["closed"] is None


def test_leaderboard_and_curves_of_every_variant(report: Path) -> None:
    """The leaderboard has a row per variant (the reference first, the other's change with
    its interval and significance in words), one plot holds every variant's pass@k with a
    legend, and the page names no external URL (it works offline)."""
    page = report.read_text()
    board = page[page.index('<table id="leaderboard">') : page.index("</table>")]
    rows = re.findall(r'<tr data-variant="(\w+)">(.*?)</tr>', board)
    assert [name for name, _ in rows] == ["base", "cand"]
    cells = [
        re.sub(r"<[^>]+>", "", unescape(cell)) for cell in re.findall(r"<td.*?</td>", rows[1][1])
    ]
    assert cells == [
        "cand",
        "agent:cand",
        "0.500 0.000\u20131.000",
        "0.667",
        "+0.000 (-0.500 to +0.500) not significant",
        "60 / n/a",
        "1.8000",
        "0.6000",
    ]
    assert "reference" in rows[0][1] and "change vs base (95% interval)" in board
    plot = page[page.index('aria-label="pass@k by variant"') :]
    plot = plot[: plot.index("</svg>")]
    assert plot.count('class="legend"') == 2 and ">base<title>" in plot
    assert 'stroke-dasharray="7 3"' in plot and "<rect" in plot  # cand: dashed, squares
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) == {"http://www.w3.org/2000/svg"}
    assert "url(" not in page and "@import" not in page
    assert 'id="variant-count">2<' in page and 'id="pass-at-1"' not in page
    data = page_data(report)
    assert data["variants"] == ["base", "cand"]
    assert {(t["id"], t.get("v")) for t in data["tasks"]} >= {("solo", None), ("worse", "cand")}


def test_marked_lines_differ_without_color() -> None:
    """Up to sixteen lines of a marked plot differ in marker or dash, so they are told apart
    in grey too; an unmarked plot keeps its look."""
    names = [f"v{i}" for i in range(16)]
    svg = line_plot("p", [1, 2], [Series(n, [0.5, 0.6]) for n in names], ["", ""], "k", "y", True)
    lines = re.findall(r'<polyline class="series" points="[^"]*" stroke="[^"]*"([^/]*)/>', svg)
    marks = re.findall(r"<(circle|rect|polygon class=\"marker-\w+\")", svg)
    styles = list(zip(lines, marks[-16:], strict=True))  # the legend's, in order
    assert len(set(styles)) == 16
    plain = line_plot("p", [1], [Series("a", [0.5]), Series("b", [0.4])], [""], "k", "y")
    assert "stroke-dasharray" not in plain and "<polygon" not in plain
    assert 'viewBox="0 0 420 250"' in plain


def test_a_variant_page_needs_no_pooled_metrics(tmp_path: Path) -> None:
    """A summary of several variants (no top-level metrics) renders; `matrix_rows` leaves out
    the tasks that name their own agent."""
    store = write_variant_run(tmp_path / "cache")
    summary = variant_summary(store)
    assert summary.metrics is None
    page = render_html(summary, {})
    assert "pass@k by variant" in page and "pass@k and pass^k" not in page
    rows = matrix_rows(summary.tasks, ["base", "cand"])
    assert [(r["id"], r["cells"], r["d"]) for r in rows] == [
        ("agree", [[2, 2], [2, 2]], False),
        ("better", [[0, 2], [1, 2]], True),
        ("worse", [[1, 2], [0, 2]], True),
    ]
    halves = matrix_rows(
        [
            t.model_copy(update={"n": 4, "c": 2}) if t.variant == "cand" else t
            for t in summary.tasks
        ],
        ["base", "cand", "absent"],
    )
    worse = next(r for r in halves if r["id"] == "worse")
    assert worse["cells"] == [[1, 2], [2, 4], None] and worse["d"] is False


def test_a_page_without_variants_has_no_variant_parts() -> None:
    """A run without variants gets no leaderboard, matrix or variant curves, and its data no
    variant keys: the page it had."""
    rows = [
        IndexRow(aid("ds", "a", 0), "", "", "pass", 1.0, 0.5, None, None, None, (), "", None, "")
    ]
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], {}, 0.0, 0.0, 1, 1, "complete", [])
    page = render_html(build_summary(run, rows, ks=None, session_counts={}, status="complete"), {})
    for part in ('id="variants"', 'id="matrix', "pass@k by variant", 'id="variant-count"'):
        assert part not in page
    data = json.loads(re.findall(r'id="agenteval-data">(.*?)</script>', page)[0])
    assert "variants" not in data and "matrix" not in data and "v" not in data["tasks"][0]
    assert "pass@k and pass^k" in page and 'id="pass-at-1"' in page


def test_leaderboard_says_significance_in_words_and_names_variants_left_out(
    tmp_path: Path,
) -> None:
    """A significant fall reads `▼ significant` (not color alone), a rise `▲ significant`, and
    variants whose records the summary left out are named under the leaderboard."""
    summary = variant_summary(write_variant_run(tmp_path / "cache"))
    assert summary.comparison is not None
    fall = summary.comparison[0].model_copy(
        update={"change": -0.5, "ci95": [-0.9, -0.1], "significant": True}
    )
    page = render_html(
        summary.model_copy(update={"comparison": [fall], "not_selected": ["old", "older"]}), {}
    )
    board = unescape(re.sub(r"<[^>]+>", "", page[page.index('<tr data-variant="cand">') :]))
    assert board.startswith("candagent:cand0.500 0.000\u20131.0000.667-0.500 (-0.900 to -0.100) ▼")
    assert 'class="sig-worse">▼ significant<' in page
    assert "left out of every number): old, older</p>" in page
    rise = fall.model_copy(update={"change": 0.5, "ci95": [0.1, 0.9]})
    page = render_html(summary.model_copy(update={"comparison": [rise]}), {})
    assert 'class="sig-better">▲ significant<' in page and 'id="not-selected"' not in page


@needs_chromium
def test_tags_by_variant_in_chromium(report: Path, browser: Browser) -> None:
    """A run with variants whose tasks have tags shows each tag's pass@1 with its interval per
    variant (a table and a bar per tag and variant), offers every tag in the task filter, and
    never says that no task has tags."""
    dom, console = browser.dom(report)
    assert console == []
    table = dom[dom.index('id="tag-matrix"') :]
    table = table[: table.index("</table>")]
    rows = [
        [unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td.*?</td>", row)]
        for row in re.findall(r"<tr data-tag=.*?</tr>", table)
    ]
    assert rows == [
        ["all", "3", "0.500 0.000\u20131.000", "0.500 0.000\u20131.000"],
        ["easy", "2", "0.750 n/a", "0.500 n/a"],
        ["hard", "2", "0.250 n/a", "0.250 n/a"],
    ]
    assert "pass@1 (95% CI) by tag and variant" in dom
    plot = dom[dom.index('aria-label="pass@1 by tag and variant, 95% CI"') :]
    plot = plot[: plot.index("</svg>")]
    bars = re.findall(r"<title>([^<]*): ([\d.]+) \(", plot)
    assert bars == [
        ("all · base", "0.500"),
        ("all · cand", "0.500"),
        ("easy · base", "0.750"),
        ("easy · cand", "0.500"),
        ("hard · base", "0.250"),
        ("hard · cand", "0.250"),
    ]
    assert "no task has tags" not in dom
    tags = re.search(r'<select id="filter-tag".*?</select>', dom, re.S)
    assert tags is not None
    assert re.findall(r"<option[^>]*>([^<]*)</option>", tags[0]) == [
        "all tags",
        "all",
        "easy",
        "hard",
        "own",
    ]


def test_tags_of_tasks_with_their_own_agent_only_are_not_called_no_tags(tmp_path: Path) -> None:
    """When only tasks naming their own agent have tags (not compared), the tag plot says so
    rather than "no task has tags"; a variant that ran no task of a tag shows a dash."""
    summary = variant_summary(write_variant_run(tmp_path / "cache"))
    assert summary.variants is not None
    bare = {name: part.model_copy(update={"tags": {}}) for name, part in summary.variants.items()}
    page = render_html(summary.model_copy(update={"variants": bare}), {})
    assert "only tasks with their own agent have tags" in page
    assert "no task has tags" not in page and 'id="tag-matrix"' not in page
    one = {**summary.variants, "cand": summary.variants["cand"].model_copy(update={"tags": {}})}
    page = render_html(summary.model_copy(update={"variants": one}), {})
    cell = re.search(r'<tr data-tag="all">.*?<td class="num" data-variant="cand">(.*?)</td>', page)
    assert cell is not None and 'title="no task of this tag">&ndash;' in cell[1]


@needs_chromium
def test_fingerprint_cost_split_and_coinciding_curves_in_chromium(
    tmp_path: Path, browser: Browser
) -> None:
    """The agent fingerprint of a run with variants reads as `path = value` pairs (no Python
    repr); the cost card gives US dollars and the agent / judge split; when pass@k equals
    pass^k at every k the plot says they coincide and draws them with distinct markers."""
    summary = variant_summary(write_variant_run(tmp_path / "cache"))
    totals = summary.totals.model_copy(
        update={"cost": 4.612, "agent_cost": 3.968, "judge_cost": 0.644}
    )
    page = write_html(summary.model_copy(update={"totals": totals}), {}, tmp_path / "variants.html")
    dom, console = browser.dom(page)
    assert console == []
    assert text_of(dom, "cost-split") == "agent $3.9680 · judge $0.6440"
    assert "<dt>cost (US$)</dt><dd>$4.6120<" in dom
    fingerprint = re.search(r'class="meta fingerprint">agent fingerprint <code>(.*?)</code>', dom)
    assert fingerprint is not None
    assert unescape(fingerprint[1]) == "variants: ds/base = agent:base, ds/cand = agent:cand"
    rows = [
        IndexRow(aid("ds", t, i), "", "", s, 1.0, 0.5, None, None, None, (), "", None, "")
        for t, s in (("a", "pass"), ("b", "fail"))
        for i in range(3)
    ]
    run = RunInfo("r1", [{"name": "ds", "version": "1"}], {}, 0.0, 0.0, 6, 6, "complete", [])
    plain = build_summary(run, rows, ks=None, session_counts={}, status="complete")
    page = write_html(plain, {}, tmp_path / "plain.html")
    dom, console = browser.dom(page)
    assert console == []
    plot = dom[dom.index('aria-label="pass@k and pass^k"') :]
    plot = plot[: plot.index("</svg>")]
    assert "pass@k = pass^k at every k: each task passed all its attempts or none" in plot
    assert plot.count("<circle") == 3 + 1 and plot.count("<rect") == 3 + 1  # points + legend
    assert 'stroke-dasharray="7 3"' in plot
    assert "<dd>n/a</dd>" in dom  # no cost: no dollar sign


def test_a_one_attempt_leaderboard_has_one_pass_at_1_column(tmp_path: Path) -> None:
    """At k = 1 the leaderboard shows pass@1 (with its interval) once, not again as pass@k;
    each row has a cell per column."""
    info, rows = stored_run(write_variant_run(tmp_path / "cache"), "vr")
    summary = build_summary(info, rows, ks=[1], session_counts={}, status="complete")
    page = render_html(summary, {})
    board = page[page.index('<table id="leaderboard">') : page.index("</table>")]
    heads = re.findall(r"<th [^>]*>([^<]*)</th>", board)
    assert [h for h in heads if h.startswith("pass@")] == ["pass@1 (95% CI)"]
    body = re.findall(r"<tr data-variant=.*?</tr>", board, re.S)
    assert len(body) == 2 and all(row.count("<td") == len(heads) for row in body)
