// pytest-agenteval HTML report: the task table and the attempt drill-down.
// Data from the page is only ever set as textContent, never parsed as markup.
(function () {
  "use strict";
  var PAGE = 200;
  var PREVIEW = 400;  // characters of an input, expected answer or judge text shown at first
  var FOLD_LINES = 6;  // lines of a trace event's text shown before "show all"
  var data = JSON.parse(document.getElementById("agenteval-data").textContent);
  var tbody = document.querySelector("#task-table tbody");
  var more = document.getElementById("more");
  var text = document.getElementById("filter-text");
  var tagSelect = document.getElementById("filter-tag");
  var statusSelect = document.getElementById("filter-status");
  var countLabel = document.getElementById("shown-count");
  var sortKey = null, sortDir = 1, rows = data.tasks, shown = 0;

  function el(tag, cls, content) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (content !== undefined && content !== null) node.textContent = String(content);
    return node;
  }
  function num(value, digits) {
    return value === null || value === undefined ? "n/a" : value.toFixed(digits);
  }
  function seconds(value) {
    if (value === null || value === undefined) return "n/a";
    if (value >= 100) return value.toFixed(0) + "s";
    if (value >= 1) return value.toFixed(1) + "s";
    if (value >= 0.01) return (value * 1000).toFixed(0) + "ms";
    return (value * 1000).toPrecision(2) + "ms";
  }

  var STATUS = {
    pass: function (t) { return t.n > 0 && t.c === t.n; },
    fail: function (t) { return t.c < t.n; },
    none: function (t) { return t.c === 0; },
    error: function (t) { return t.e > 0; }
  };

  function matches(task, needle, tag, status) {
    if (tag && task.tags.indexOf(tag) < 0) return false;
    if (status && !STATUS[status](task)) return false;
    if (!needle) return true;
    if (task.id.toLowerCase().indexOf(needle) >= 0) return true;
    if (task.v && task.v.toLowerCase().indexOf(needle) >= 0) return true;
    if (task.tags.join(" ").toLowerCase().indexOf(needle) >= 0) return true;
    return task.a.some(function (a) { return (a.r || "").toLowerCase().indexOf(needle) >= 0; });
  }

  function compare(a, b) {
    var x = a[sortKey], y = b[sortKey];
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;  // unknown values last, either way
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * sortDir;
  }

  function refresh() {
    var needle = text.value.trim().toLowerCase();
    rows = data.tasks.filter(function (t) {
      return matches(t, needle, tagSelect.value, statusSelect.value);
    });
    if (sortKey) rows.sort(compare);
    tbody.textContent = "";
    shown = 0;
    showMore();
  }

  function showMore() {
    var end = Math.min(shown + PAGE, rows.length);
    var fragment = document.createDocumentFragment();
    for (var i = shown; i < end; i++) fragment.appendChild(taskRow(rows[i]));
    tbody.appendChild(fragment);
    shown = end;
    countLabel.textContent = "showing " + shown + " of " + rows.length + " tasks" +
      (rows.length < data.tasks.length ? " (" + data.tasks.length + " in the run)" : "");
    more.hidden = shown >= rows.length;
    more.textContent = "show " + Math.min(PAGE, rows.length - shown) + " more";
  }

  function taskRow(task) {
    var tr = el("tr", "task");
    tr.dataset.task = task.id;
    var name = el("td", null, data.multi ? task.ds + " / " + task.id : task.id);
    if (task.v) name.appendChild(el("span", "variant", task.v));
    task.tags.forEach(function (tag) { name.appendChild(el("span", "tag", tag)); });
    tr.appendChild(name);
    tr.appendChild(el("td", "num", task.n));
    tr.appendChild(el("td", "num" + (task.c === 0 ? " zero" : ""), task.c));
    tr.appendChild(el("td", "num", task.e));
    tr.appendChild(el("td", "num", num(task.p1, 3)));
    if (data.k > 1) tr.appendChild(el("td", "num", num(task.pk, 3)));
    tr.appendChild(el("td", "num", num(task.cost, 4)));
    tr.appendChild(el("td", "num", seconds(task.p50)));
    tr.addEventListener("click", function () { toggle(tr, task); });
    return tr;
  }

  function toggle(tr, task) {
    var next = tr.nextSibling;
    if (next && next.className === "drill-row") {
      tbody.removeChild(next);
      tr.classList.remove("open");
      return;
    }
    var row = el("tr", "drill-row");
    var cell = el("td", "drill");
    cell.colSpan = data.k > 1 ? 8 : 7;
    task.a.forEach(function (a) { cell.appendChild(attemptBox(task, a)); });
    row.appendChild(cell);
    tbody.insertBefore(row, next);
    tr.classList.add("open");
  }

  function block(parent, label, value, length) {
    if (value === null || value === undefined) return;
    parent.appendChild(el("div", "label", label));
    parent.appendChild(el("pre", null, value));
    if (length > value.length) {
      parent.appendChild(el("div", "cut", "showing the first " + value.length + " of " +
        length.toLocaleString("en") + " characters"));
    }
  }

  // A long text: its first PREVIEW characters and a "show all" toggle; the page holds up to
  // TEXT_LIMIT characters of it, `agenteval show RUN TASK/N --full` all of them.
  function foldable(parent, label, pair, task, a) {
    if (!pair) return;
    var value = pair[0], length = pair[1];
    parent.appendChild(el("div", "label", label));
    var pre = el("pre", "foldable", value.length > PREVIEW ? value.slice(0, PREVIEW) + "…" : value);
    parent.appendChild(pre);
    if (value.length > PREVIEW) {
      var button = el("button", "show-all", "show all");
      button.type = "button";
      button.addEventListener("click", function (event) {
        event.stopPropagation();
        var open = button.textContent === "show all";
        pre.textContent = open ? value : value.slice(0, PREVIEW) + "…";
        button.textContent = open ? "show less" : "show all";
      });
      parent.appendChild(button);
    }
    if (length > value.length) {
      parent.appendChild(el("div", "cut", "the page holds the first " + value.length + " of " +
        length.toLocaleString("en") + " characters; agenteval show " + data.run + " " +
        task.id + (task.v ? "/" + task.v : "") + "/" + a.i + " --full shows all"));
    }
  }

  // The attempt's trace as a timeline: a model turn, a tool call with its command and output
  // (folded past FOLD_LINES lines), a message, a limit hit; each [type, heading, text, length].
  function timeline(parent, tr, task, a) {
    parent.appendChild(el("div", "label", "trace (" + tr.turns + " model turns, " + tr.tools +
      " tool calls)"));
    var list = el("ol", "timeline");
    tr.e.forEach(function (ev) {
      var item = el("li", "ev ev-" + ev[0]);
      item.appendChild(el("div", "ev-head", ev[1]));
      if (ev[2]) folded(item, ev[2], ev[3], task, a);
      list.appendChild(item);
    });
    parent.appendChild(list);
    if (tr.n > tr.e.length) {
      parent.appendChild(el("div", "cut", "the page holds the first " + tr.e.length + " of " +
        tr.n + " events; agenteval show " + data.run + " " + task.id + (task.v ? "/" + task.v : "") +
        "/" + a.i + " shows all"));
    }
  }

  function folded(parent, text, length, task, a) {
    var lines = text.split("\n");
    var short = lines.length > FOLD_LINES ? lines.slice(0, FOLD_LINES).join("\n") + "\n…" : text;
    var pre = el("pre", "ev-body", short);
    parent.appendChild(pre);
    if (lines.length > FOLD_LINES) {
      var button = el("button", "show-all", "show all " + lines.length + " lines");
      button.type = "button";
      button.addEventListener("click", function (event) {
        event.stopPropagation();
        var open = pre.textContent === short;
        pre.textContent = open ? text : short;
        button.textContent = open ? "show less" : "show all " + lines.length + " lines";
      });
      parent.appendChild(button);
    }
    if (length > text.length) {
      parent.appendChild(el("div", "cut", "the page holds the first " + text.length + " of " +
        length.toLocaleString("en") + " characters; agenteval show " + data.run + " " + task.id +
        (task.v ? "/" + task.v : "") + "/" + a.i + " --full shows all"));
    }
  }

  function judgeBox(parent, j, task, a) {
    var facts = [];
    if (j.th !== null && j.th !== undefined) facts.push("threshold " + j.th);
    if (j.m) facts.push("model " + j.m);
    if (j.c !== null && j.c !== undefined) facts.push("cost " + num(j.c, 4));
    var box = el("div", "judge");
    if (facts.length) box.appendChild(el("div", "mono", facts.join(" · ")));
    foldable(box, "judge prompt", j.p, task, a);
    foldable(box, "judge reply", j.r, task, a);
    parent.appendChild(box);
  }

  // The files the agent changed: [path, change, size, kept, text of a small kept text file].
  function filesBox(parent, files) {
    var kept = files.filter(function (f) { return f[3]; }).length;
    var listed = files.filter(function (f) { return f[1] !== "note"; }).length;
    parent.appendChild(el("div", "label", "files changed (" + listed + ", " + kept + " kept)"));
    var list = el("ul", "files");
    files.forEach(function (f) {
      if (f[1] === "note") { list.appendChild(el("li", "muted", f[0])); return; }
      var size = f[1] === "deleted" ? "" : " " + f[2].toLocaleString("en") + " B";
      var item = el("li", "mono", f[1] + " " + f[0] + size + (f[3] || f[1] === "deleted" ? "" : " (not kept)"));
      if (f[4] !== null && f[4] !== undefined) item.appendChild(el("pre", null, f[4]));
      list.appendChild(item);
    });
    parent.appendChild(list);
  }

  function attemptBox(task, a) {
    var box = el("div", "attempt");
    box.dataset.attempt = a.i;
    var head = el("h3", null, "attempt " + a.i + " ");
    head.appendChild(el("span", "badge status-" + a.s, a.s));
    head.appendChild(el("span", "muted", " " + seconds(a.d)));
    if (a.w) { head.appendChild(el("span", "muted", " (after " + seconds(a.w) + " waiting for a slot)")); }
    (a.f || []).forEach(function (flag) { head.appendChild(el("span", "flag", flag)); });
    box.appendChild(head);
    if (a.lost) {
      box.appendChild(el("div", "cut", "the full record could not be read; its reason: " + a.r));
      return box;
    }
    foldable(box, "input", a["in"], task, a);
    foldable(box, "expected", a.x, task, a);
    if (a.v && a.v.length) {
      box.appendChild(el("div", "label", "graders"));
      a.v.forEach(function (v) {
        var line = el("div", "verdict");
        line.appendChild(el("span", v[1] ? "ok" : "no", v[1] ? "pass " : "fail "));
        line.appendChild(el("strong", null, v[0]));
        if (v[2] !== null && v[2] !== undefined) line.appendChild(el("span", "muted", " score " + num(v[2], 3)));
        line.appendChild(el("span", null, ": " + v[3]));
        box.appendChild(line);
        if (v[4]) judgeBox(box, v[4], task, a);
      });
    }
    if (a.e !== null && a.e !== undefined) {
      var where = [a.et, a.ph ? "in " + a.ph : null].filter(Boolean).join(" ");
      block(box, "error" + (where ? " (" + where + ")" : ""), a.e, a.el);
    }
    block(box, "output", a.o, a.ol);
    if (a.st) box.appendChild(el("div", "cut", "stopped at its " + a.st + " (graded on what it produced)"));
    if (a.tr) timeline(box, a.tr, task, a);
    block(box, "transcript", a.t, a.tl);
    if (a.fs) filesBox(box, a.fs);
    if (a.u) {
      var parts = [];
      Object.keys(a.u).forEach(function (key) {
        if (a.u[key] !== null && a.u[key] !== undefined) parts.push(key + " " + a.u[key]);
      });
      if (parts.length) {
        box.appendChild(el("div", "label", "usage"));
        box.appendChild(el("div", "mono", parts.join(" · ")));
      }
    }
    if (a.tm) {
      box.appendChild(el("div", "label", "timings"));
      box.appendChild(el("div", "mono timings", a.tm.map(function (t) {
        return t[0] + " " + (t[1] === null ? "?" : seconds(t[1]));
      }).join(" · ")));
    }
    if (a.c !== null && a.c !== undefined) {
      box.appendChild(el("div", "label", "cost"));
      var split = a.cj !== null && a.cj !== undefined ?
        " (agent " + num(a.ca || 0, 4) + ", judge " + num(a.cj, 4) + ")" : "";
      box.appendChild(el("div", "mono cost", num(a.c, 4) + split));
    }
    return box;
  }

  function sortBy(th) {
    var key = th.dataset.key;
    sortDir = sortKey === key ? -sortDir : (key === "id" ? 1 : -1);
    sortKey = key;
    document.querySelectorAll("#task-table th").forEach(function (other) {
      other.setAttribute("aria-sort", "none");
    });
    th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
    refresh();
  }

  // report.html#task=ID opens that task's attempts (a link to share, and how tests look in).
  function openFromHash() {
    var match = /^#task=(.+)$/.exec(location.hash);
    if (!match) return;
    var id;
    try {
      id = decodeURIComponent(match[1]);
    } catch (malformed) {
      return;  // a hand-edited or cut link (`%E0%A4%A`): no task to open
    }
    var index = rows.findIndex(function (t) { return t.id === id || t.ds + "/" + t.id === id; });
    if (index < 0) return;
    while (shown <= index) showMore();
    var tr = tbody.querySelectorAll("tr.task")[index];
    toggle(tr, rows[index]);
    tr.scrollIntoView({block: "nearest"});
  }

  // A run with variants: the tasks x variants matrix, each cell c/n colored by its rate, a
  // filter to the tasks where the variants disagree, a cell opening those attempts.
  function variantMatrix() {
    var body = document.querySelector("#matrix tbody");
    var disagree = document.getElementById("filter-disagree");
    var label = document.getElementById("matrix-count");
    var button = document.getElementById("matrix-more");
    var byKey = {}, shownRows = [], drawn = 0;
    data.tasks.forEach(function (t) { if (t.v) byKey[[t.ds, t.id, t.v].join("\u0000")] = t; });

    function shade(cell) {
      var c = cell[0], n = cell[1];
      if (c === n) return 4;
      if (c === 0) return 0;
      return 1 + Math.min(2, Math.floor(3 * c / n));
    }
    function open(tr, row, index) {
      var variant = data.variants[index], next = tr.nextSibling;
      var was = next && next.className === "drill-row" ? next.dataset.variant : null;
      if (was !== null) body.removeChild(next);
      tr.querySelectorAll("td.open").forEach(function (td) { td.classList.remove("open"); });
      if (was === variant) return;
      var task = byKey[[row.ds, row.id, variant].join("\u0000")];
      var drill = el("tr", "drill-row");
      drill.dataset.variant = variant;
      var cell = el("td", "drill");
      cell.colSpan = data.variants.length + 1;
      cell.appendChild(el("div", "label", "variant " + variant + " · task " + row.id));
      task.a.forEach(function (a) { cell.appendChild(attemptBox(task, a)); });
      drill.appendChild(cell);
      body.insertBefore(drill, tr.nextSibling);
      tr.children[index + 1].classList.add("open");
    }
    function matrixRow(row) {
      var tr = el("tr", "mrow" + (row.d ? " disagree" : ""));
      tr.dataset.task = row.id;
      tr.appendChild(el("td", null, data.multi ? row.ds + " / " + row.id : row.id));
      row.cells.forEach(function (cell, index) {
        if (!cell) {
          tr.appendChild(el("td", "cell none", "–"));
          return;
        }
        var td = el("td", "cell rate-" + shade(cell), cell[0] + "/" + cell[1]);
        td.dataset.variant = data.variants[index];
        td.tabIndex = 0;
        td.title = data.variants[index] + ": " + cell[0] + " of " + cell[1] + " attempts passed";
        td.addEventListener("click", function () { open(tr, row, index); });
        td.addEventListener("keydown", function (event) {
          if (event.key === "Enter") open(tr, row, index);
        });
        tr.appendChild(td);
      });
      return tr;
    }
    function more() {
      var end = Math.min(drawn + PAGE, shownRows.length);
      var fragment = document.createDocumentFragment();
      for (var i = drawn; i < end; i++) fragment.appendChild(matrixRow(shownRows[i]));
      body.appendChild(fragment);
      drawn = end;
      label.textContent = "showing " + drawn + " of " + shownRows.length + " tasks" +
        (disagree.checked ? " where the variants disagree (" + data.matrix.length + " in all)" : "");
      button.hidden = drawn >= shownRows.length;
      button.textContent = "show " + Math.min(PAGE, shownRows.length - drawn) + " more";
    }
    function draw() {
      shownRows = data.matrix.filter(function (row) { return !disagree.checked || row.d; });
      body.textContent = "";
      drawn = 0;
      more();
    }
    disagree.addEventListener("change", draw);
    button.addEventListener("click", more);
    draw();
  }

  data.tags.forEach(function (tag) {
    var option = el("option", null, tag);
    option.value = tag;
    tagSelect.appendChild(option);
  });
  document.querySelectorAll("#task-table th").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (event) { if (event.key === "Enter") sortBy(th); });
  });
  var timer = null;
  text.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(refresh, 150);
  });
  tagSelect.addEventListener("change", refresh);
  statusSelect.addEventListener("change", refresh);
  more.addEventListener("click", showMore);
  refresh();
  if (data.variants) variantMatrix();
  openFromHash();
  document.body.dataset.renderedMs = performance.now().toFixed(1);
})();
