"""Store damage is loud but never fatal: bad index rows, lost records, damaged or missing run.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import WORKERS, DatasetMaker, aid, run_layout, summary_of, task
from pytest_agenteval.cli import main
from pytest_agenteval.core.errors import StoreError
from pytest_agenteval.store.index import FIELDS, UNREADABLE_DETAILS, read_index
from pytest_agenteval.store.plan import make_plan
from pytest_agenteval.store.problems import OUTPUT_LOST, REINDEXED, RUN_SKIPPED, RUNS_AGAIN
from pytest_agenteval.store.runs import RunFileError, Store
from test_store import record

DS = [{"name": "ds", "version": "1"}]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path)
    store.create_run("r1", DS, {"override": None})
    for name in ("a", "b", "c"):
        store.commit("r1", record(name, 0, "fail"))
    return store


def index_lines(store: Store, run_id: str = "r1") -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in (store.runs_dir / run_id / "index.jsonl").read_bytes().splitlines()
    ]


def write_index(store: Store, lines: list[bytes], run_id: str = "r1") -> None:
    (store.runs_dir / run_id / "index.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))


class Raw(str):
    """JSON text put into a line as it is (json.dumps cannot write `1e400`)."""


def with_field(line: dict[str, Any], name: str, value: Any) -> bytes:
    """An index line with one field set to `value` (or removed, for `...`)."""
    changed = {k: v for k, v in line.items() if k != name}
    if value is not ...:
        changed[name] = "\0raw" if isinstance(value, Raw) else value
    return json.dumps(changed).replace('"\\u0000raw"', str(value)).encode()


# --- index rows ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("score", "high", 'at score: expected a number or null, got "high"'),
        ("attempt", "1", 'at attempt: expected an integer, got "1"'),
        ("attempt", True, "at attempt: expected an integer, got true"),
        ("attempt", -1, "at attempt: a negative attempt -1"),
        ("tags", 5, "at tags: expected a list, got 5"),
        ("tags", ["ok", 3], 'at tags: expected a list of strings, got ["ok", 3]'),
        ("duration", None, "at duration: expected a number, got null"),
        ("duration", Raw("1e400"), "at duration: not a finite number: Infinity"),
        ("input_tokens", 1.5, "at input_tokens: expected an integer or null, got 1.5"),
        ("status", "passed", 'at status: unknown status "passed"'),
        ("schema", "agenteval.record/2", 'at schema: unknown schema "agenteval.record/2"'),
        ("record", [1], "at record: expected [offset, length] in records.jsonl, got [1]"),
        ("replay", "garbage", 'at replay: expected "" or a JSON object, got "garbage"'),
        ("digest", ..., "missing field 'digest'"),
    ],
)
def test_a_mistyped_index_line_is_left_out_and_named(
    store: Store, name: str, value: Any, expected: str
) -> None:
    """A valid-JSON line with a wrong field: the reader leaves that attempt out and names the
    file, the line and the field; the store re-indexes it from its intact record."""
    first, second, third = index_lines(store)
    write_index(
        store,
        [json.dumps(first).encode(), with_field(second, name, value), json.dumps(third).encode()],
    )
    path = store.runs_dir / "r1/index.jsonl"
    assert sorted(key.task_id for key in read_index(path).rows) == ["a", "c"]
    rows, bad = store.index("r1")
    assert sorted(r.task_id for r in rows) == ["a", "b", "c"]
    (problem,) = bad
    assert problem.where == f"{path}:2"
    assert expected in problem.problem and problem.effect == REINDEXED
    assert store.problems == [problem]
    assert len(store.index("r1", for_plan=False)[0]) == 3, "metrics read the same rows"


def test_nan_and_infinity_are_not_numbers(store: Store) -> None:
    """JSON's non-standard NaN/Infinity never reach the metrics."""
    first, second, third = (store.runs_dir / "r1/index.jsonl").read_bytes().splitlines()
    nan = second.replace(b'"score": 0.0', b'"score": NaN')
    inf = third.replace(b'"duration": 0.5', b'"duration": -Infinity')
    write_index(store, [first, nan, inf])
    read = read_index(store.runs_dir / "r1/index.jsonl")
    rows, bad = list(read.rows.values()), read.problems
    assert [r.task_id for r in rows] == ["a"]
    assert ["NaN is not a number" in b.problem for b in bad] == [True, False]
    assert "-Infinity is not a number" in bad[1].problem


def json_values(floats: st.SearchStrategy[float]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none() | st.booleans() | st.integers() | floats | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=10,
    )


JSON = json_values(st.floats())
"""Any JSON value, and Python's NaN / Infinity extensions."""
STRICT_JSON = json_values(st.floats(allow_nan=False, allow_infinity=False))


def assert_well_typed(rows: list[Any]) -> None:
    for row in rows:
        assert type(row.dataset) is str and type(row.task_id) is str and type(row.attempt) is int
        assert type(row.score) in (int, float, type(None)) and type(row.duration) in (int, float)
        assert all(type(t) is str for t in row.tags) and type(row.reason) is str


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(JSON, max_size=4))
def test_the_index_reader_never_raises_on_any_json(lines: list[Any]) -> None:
    """Arbitrary JSON values as index lines: every line is a row or a reported problem."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "index.jsonl"
        path.write_text("".join(json.dumps(v) + "\n" for v in lines))
        read = read_index(path)
    assert len(read.rows) + len(read.problems) <= len(lines)
    assert all(p.problem != "unreadable" for p in read.problems)


VALID = {
    "schema": "agenteval.record/1",
    "dataset": "ds",
    "task_id": "t",
    "attempt": 0,
    "digest": "d",
    "run_digest": "r",
    "status": "fail",
    "score": 0.5,
    "duration": 1,
    "input_tokens": None,
    "output_tokens": 3,
    "cost": None,
    "tags": ["x"],
    "reason": "why",
    "phase": None,
    "replay": "{}",
    "record": [0, 10],
}


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(FIELDS)), value=STRICT_JSON | st.just(...))
def test_the_index_reader_checks_every_field(name: str, value: Any) -> None:
    """Any value in any one field of a valid line: a well-typed row, or the field is named."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "index.jsonl"
        path.write_bytes(with_field(VALID, name, value) + b"\n")
        for for_plan in (True, False):
            read = read_index(path, for_plan=for_plan)
            assert_well_typed(list(read.rows.values()))
            if read.problems:
                (problem,) = read.problems
                assert name in problem.problem and not read.rows
            else:
                assert len(read.rows) == 1


def test_a_damaged_newest_line_never_brings_back_an_older_verdict(store: Store) -> None:
    """The newest line of an attempt wins even when damaged: its intact record is re-indexed,
    and when that record is damaged too the attempt runs again, instead of silently reusing
    the older verdict it replaced."""
    store.commit("r1", record("a", 0, "pass"), replaces=True)
    lines = index_lines(store)
    write_index(
        store,
        [json.dumps(line).encode() for line in lines[:3]] + [with_field(lines[3], "score", "x")],
    )
    rows, bad = Store(store.root).index("r1")
    assert {r.task_id: r.status for r in rows} == {"a": "pass", "b": "fail", "c": "fail"}
    assert bad[0].where.endswith(":4") and bad[0].effect == REINDEXED
    path = store.runs_dir / "r1/records.jsonl"
    path.write_bytes(path.read_bytes()[: lines[3]["record"][0] + 10] + b"\n")
    rows, bad = Store(store.root).index("r1")
    assert sorted(r.task_id for r in rows) == ["b", "c"] and bad[0].effect == RUNS_AGAIN


def test_a_torn_line_is_reindexed_and_forgotten_once_saved(store: Store) -> None:
    """A torn last line names its attempt, whose intact record is re-indexed; the session that
    takes the run next appends the re-indexed line, so it stops being reported after."""
    raw = (store.runs_dir / "r1/index.jsonl").read_bytes().splitlines()
    write_index(store, [*raw[:2], raw[2][:80]])
    store.close()
    rerun = Store(store.root)
    rows, bad = rerun.index("r1")
    assert sorted(r.task_id for r in rows) == ["a", "b", "c"] and "not valid JSON" in bad[0].problem
    assert bad[0].effect == REINDEXED
    rerun.claim_run("r1")
    rerun.commit("r1", record("d", 0, "pass"))
    rows, bad = Store(store.root).index("r1")
    assert sorted(r.task_id for r in rows) == ["a", "b", "c", "d"] and not bad


def test_damaged_replay_details_replay_as_a_note(store: Store) -> None:
    """Replay data that is JSON but not what a replay shows never crashes an item."""
    lines = index_lines(store)
    lines[0]["replay"] = '{"verdicts": [1, 2]}'
    lines[1]["replay"] = "{not json"
    write_index(store, [json.dumps(line).encode() for line in lines])
    rows, _ = store.index("r1")
    plan = make_plan(rows, rerun_errors=False, rerun_all=False)
    for name in ("a", "b"):
        decision = plan.decide(aid("ds", name, 0), "d1", "r1")
        assert decision.action == "reuse" and decision.stored is not None
        detail = decision.stored.detail()
        assert detail.error == UNREADABLE_DETAILS and detail.verdicts == ()


# --- records ---------------------------------------------------------------------------------


def test_a_garbled_record_is_reported_at_its_line(store: Store) -> None:
    """Full outputs that cannot be read are reported (path:line) when a record is read."""
    path = store.runs_dir / "r1/records.jsonl"
    data = bytearray(path.read_bytes())
    second = data.index(b"\n") + 1
    data[second : second + 20] = b"#" * 20
    path.write_bytes(bytes(data))
    fresh = Store(store.root)
    assert fresh.record("r1", aid("ds", "b", 0)) is None
    assert fresh.record("r1", aid("ds", "c", 0)) is not None
    (problem,) = fresh.problems
    assert problem.where == f"{path}:2" and problem.effect == OUTPUT_LOST
    assert "the record of b attempt 0 is not complete JSON" in problem.problem


def test_records_cut_short_are_found_when_the_index_is_read(store: Store) -> None:
    """A truncated records.jsonl is noticed by the cheap check of its end, without reading
    every record."""
    path = store.runs_dir / "r1/records.jsonl"
    path.write_bytes(path.read_bytes()[:15_000])
    fresh = Store(store.root)
    rows, bad = fresh.index("r1")
    assert len(rows) == 3 and not bad, "the verdicts still count"
    (problem,) = fresh.problems
    assert (
        problem.where == str(path)
        and "the records of 2 stored attempts lie beyond it" in problem.problem
    )


# --- run.json --------------------------------------------------------------------------------


def damage(store: Store, run_id: str, how: str) -> None:
    path = store.runs_dir / run_id / "run.json"
    if how == "deleted":
        path.unlink()
    elif how == "garbage":
        path.write_text('{"schema": "agenteval.run/1", "run_')
    else:
        path.write_text(json.dumps({**json.loads(path.read_text()), "planned": "many"}))


@pytest.mark.parametrize("how", ["deleted", "garbage", "mistyped"])
def test_a_damaged_newest_run_is_not_passed_over(tmp_path: Path, store: Store, how: str) -> None:
    """Resume never falls back to an older run in silence: the damaged newer one is named, with
    the command that repairs it, and no message advises deleting anything."""
    store.finish_run("r1", "complete", {})
    store.create_run("r2", DS, {})
    store.commit("r2", record("a", 0))
    store.finish_run("r2", "interrupted", {})
    damage(store, "r2", how)
    fresh = Store(tmp_path)
    with pytest.raises(StoreError) as caught:
        fresh.latest_run(DS)
    message = str(caught.value)
    assert "may be run r2" in message and "`agenteval repair r2`" in message
    assert "delete" not in message.lower()
    with pytest.raises(RunFileError, match="agenteval repair r2"):
        fresh.run("r2")
    assert [r.run_id for r in fresh.runs()] == ["r1"]
    (problem,) = fresh.problems
    assert problem.where == str(fresh.runs_dir / "r2") and problem.effect == RUN_SKIPPED


def test_an_older_damaged_run_does_not_block_resume(tmp_path: Path, store: Store) -> None:
    """Damage in a run older than the latest is reported, and the latest is resumed."""
    store.finish_run("r1", "complete", {})
    damage(store, "r1", "garbage")
    store.create_run("r2", DS, {})
    store.set_planned("r2", 1)  # a run that planned nothing is never the latest
    fresh = Store(tmp_path)
    assert fresh.latest_run(DS) == "r2"
    assert "run.json is unreadable" in fresh.problems[0].problem


def test_an_empty_run_folder_is_no_run(tmp_path: Path) -> None:
    """A folder without run.json and without attempts (a run that never started) is no damage."""
    store = Store(tmp_path)
    (store.runs_dir / "empty").mkdir()
    assert store.run("empty") is None and store.runs() == [] and store.problems == []


# --- end to end ------------------------------------------------------------------------------


def mistype_score(pytester: pytest.Pytester, task_id: str) -> str:
    """Set one stored attempt's score to "high" in its index line; returns `path:line`."""
    (index,) = (pytester.path / ".pytest_cache/agenteval/runs").glob("*/index.jsonl")
    lines = [json.loads(raw) for raw in index.read_text().splitlines()]
    (number,) = [n for n, line in enumerate(lines, 1) if line["task_id"] == task_id]
    lines[number - 1]["score"] = "high"
    index.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"{index}:{number}"


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_a_mistyped_row_is_reindexed_and_shows_even_with_q(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    workers: list[str],
) -> None:
    """`"score": "high"` in the index: report and resume re-index that attempt from its intact
    record (it does not run again), and the damage is in the terminal summary under -q and in
    summary.json."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("ok")})
    run_layout(pytester, "--agenteval", "ds", "--agenteval-run-id", "first", *workers)
    where = mistype_score(pytester, "b")
    monkeypatch.chdir(pytester.path)
    assert main(["report", "first", "--out", "again"]) == 0
    assert f"{Path(where).relative_to(pytester.path)}: at score" in capsys.readouterr().err
    assert json.loads((pytester.path / "again/summary.json").read_text())["n_attempts"] == 2
    result = run_layout(pytester, "--agenteval", "ds", "--resume-suite", "-q", *workers)
    result.assert_outcomes(passed=2)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"store damage: {Path(where).relative_to(pytester.path)}: at score: expected a number "
            f'or null, got "high"; {REINDEXED}'
        ]
    )
    assert sorted(dataset.calls()) == ["a 0", "b 0"]
    (problem,) = summary_of(pytester)["store_problems"]
    assert problem == {
        "where": where,
        "problem": 'at score: expected a number or null, got "high"',
        "effect": REINDEXED,
    }
    markdown = (Path(where.rsplit(":", 1)[0]).parent / "summary.md").read_text()
    assert "**store damage**" in markdown and "at score" in markdown
    again = run_layout(pytester, "--agenteval", "ds", "--resume-suite", "-q", *workers)
    again.assert_outcomes(passed=2)
    assert "store damage" not in again.stdout.str(), "the resume saved the re-indexed line"


@pytest.mark.slow
@pytest.mark.parametrize("workers", WORKERS)
def test_an_index_cut_mid_file_reruns_nothing_whose_record_is_intact(
    pytester: pytest.Pytester, dataset: DatasetMaker, workers: list[str]
) -> None:
    """index.jsonl cut in the middle of a line: --resume-suite re-indexes records.jsonl and
    calls the agent for none of the attempts whose records are intact."""
    dataset({f"t{i}.yaml": task("ok" if i % 2 else "no") for i in range(6)})
    run_layout(pytester, "--agenteval", "ds", "--agenteval-run-id", "cut", *workers)
    index = pytester.path / ".pytest_cache/agenteval/runs/cut/index.jsonl"
    data = index.read_bytes()
    index.write_bytes(data[: data.index(b"\n") + 40])
    resumed = run_layout(pytester, "--agenteval", "ds", "--resume-suite", *workers)
    resumed.assert_outcomes(passed=3, failed=3)
    assert len(dataset.calls()) == 6, "the resume called the agent again"
    resumed.stdout.fnmatch_lines([f"*index.jsonl:2: not valid JSON*{REINDEXED}"])
    assert summary_of(pytester)["counts"]["reused"] == 6


def test_garbage_inserted_in_records_loses_only_the_damaged_record(
    pytester: pytest.Pytester, dataset: DatasetMaker
) -> None:
    """16 bytes inserted into one record: only its output is lost (its verdict in the index
    still counts); every later record, no longer where the index says, is found again."""
    dataset({f"t{i}.yaml": task("ok") for i in range(5)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "ins")
    records = pytester.path / ".pytest_cache/agenteval/runs/ins/records.jsonl"
    data = records.read_bytes()
    second = data.index(b"\n") + 1
    records.write_bytes(data[: second + 50] + b"#" * 16 + data[second + 50 :])
    resumed = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    resumed.assert_outcomes(passed=5)
    assert len(dataset.calls()) == 5, "the resume called the agent again"
    resumed.stdout.fnmatch_lines(
        ["*records.jsonl:2: the record of t1 attempt 0 is not complete JSON*verdict*still counts"]
    )
    store = Store(records.parents[2])
    assert [store.record("ins", aid("ds", f"t{i}", 0)) is None for i in range(5)] == [
        False,
        True,
        False,
        False,
        False,
    ]


def test_repair_reindexes_the_records(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`agenteval repair` on an index cut mid-file appends the re-indexed lines: later reads
    see every attempt and no damage."""
    dataset({f"t{i}.yaml": task("ok") for i in range(4)})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "rep")
    run = pytester.path / ".pytest_cache/agenteval/runs/rep"
    data = (run / "index.jsonl").read_bytes()
    (run / "index.jsonl").write_bytes(data[: data.index(b"\n") + 1])
    monkeypatch.chdir(pytester.path)
    assert main(["repair", "rep"]) == 0
    out = capsys.readouterr().out
    assert "3 attempts re-indexed from records.jsonl" in out
    fresh = Store(run.parent.parent)
    rows, bad = fresh.index("rep")
    assert len(rows) == 4 and not bad and not fresh.problems


@pytest.mark.parametrize("how", ["garbage", "deleted"])
def test_repair_rebuilds_run_json_and_resume_continues(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    """A run whose run.json is damaged or deleted is refused by resume with the command that
    repairs it; `agenteval repair` rebuilds run.json from the summary or the records (keeping
    the damaged file), and the resume then reuses every stored attempt."""
    dataset({"a.yaml": task("ok"), "b.yaml": task("no")}, manifest={"version": "7"})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "abc12345")
    runs = pytester.path / ".pytest_cache/agenteval/runs"
    damage(Store(runs.parent), "abc12345", how)
    if how == "deleted":  # the agent then comes from the records, the version is unknown
        (runs / "abc12345/summary.json").unlink()
    refused = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*may be run abc12345*`agenteval repair abc12345`*"])
    monkeypatch.chdir(pytester.path)
    assert main(["repair", "abc"]) == 0
    out = capsys.readouterr().out
    version = "7" if how == "garbage" else "unknown"
    assert (
        f"run.json rebuilt from 2 stored attempts: dataset ds {version}, status interrupted" in out
    )
    kept = runs / "abc12345/run.json.damaged"
    assert kept.exists() == (how == "garbage")
    resumed = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    resumed.assert_outcomes(passed=1, failed=1)
    assert len(dataset.calls()) == 2, "nothing ran again"
    assert "reused" in resumed.stdout.str() and summary_of(pytester)["counts"]["reused"] == 2


def lengthen_record(pytester: pytest.Pytester, run_id: str, task_id: str) -> None:
    """Set the record length in `task_id`'s index line to a terabyte."""
    index = pytester.path / f".pytest_cache/agenteval/runs/{run_id}/index.jsonl"
    lines = [json.loads(raw) for raw in index.read_text().splitlines()]
    for line in lines:
        if line["task_id"] == task_id:
            line["record"][1] = 10**12
    index.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_record_length_past_the_end_reads_no_terabyte(
    pytester: pytest.Pytester,
    dataset: DatasetMaker,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`"record": [offset, 10**12]` in one index line is store damage, not a MemoryError:
    report --html, repair and a regrading resume find the record again by re-indexing."""
    dataset({"a.yaml": task("the answer is ok"), "b.yaml": task("ok")})
    pytester.runpytest("--agenteval", "ds", "--agenteval-run-id", "big")
    lengthen_record(pytester, "big", "a")
    monkeypatch.chdir(pytester.path)
    assert main(["report", "big", "--html", "report.html"]) == 0
    assert "the answer is ok" in (pytester.path / "report.html").read_text()
    assert "names the wrong place in records.jsonl for 1 attempts" in capsys.readouterr().err
    assert main(["repair", "big"]) == 0
    assert "1 attempts re-indexed from records.jsonl" in capsys.readouterr().out
    lengthen_record(pytester, "big", "a")
    calls = len(dataset.calls())
    dataset({"a.yaml": {**task("the answer is ok"), "graders": ["contains"]}, "b.yaml": task("ok")})
    result = pytester.runpytest("--agenteval", "ds", "--resume-suite")
    result.assert_outcomes(passed=2)
    assert len(dataset.calls()) == calls and summary_of(pytester)["counts"]["regraded"] == 1
    result.stdout.fnmatch_lines(["*index.jsonl: names the wrong place in records.jsonl*"])


def test_a_records_tail_cut_mid_record_then_appended_to(store: Store) -> None:
    """records.jsonl cut inside its last record: that attempt's verdict counts and its output
    is named lost; the next session appends after the torn line, and every other record (old
    and new) is read back."""
    path = store.runs_dir / "r1/records.jsonl"
    store.close()
    path.write_bytes(path.read_bytes()[:-40])
    rerun = Store(store.root)
    rows, _ = rerun.index("r1")
    assert len(rows) == 3 and "the records of 1 stored attempts lie beyond" in str(rerun.problems)
    rerun.claim_run("r1")
    rerun.commit("r1", record("d", 0, "pass"))
    fresh = Store(store.root)
    found = {r.task_id for r in fresh.records("r1")}
    assert found == {"a", "b", "d"} and len(fresh.index("r1")[0]) == 4
    assert "the record of c attempt 0 is not complete JSON" in str(fresh.problems)


@pytest.mark.parametrize("which", [0, 2])
def test_an_index_line_pointing_at_another_attempts_record(store: Store, which: int) -> None:
    """An index line naming another attempt's record (an older line, or the newest): the
    attempt's own record is found by re-indexing, never taken for another's."""
    lines = index_lines(store)
    lines[which]["record"] = lines[1]["record"]
    write_index(store, [json.dumps(line).encode() for line in lines])
    fresh = Store(store.root)
    key = aid("ds", "ac"[which // 2], 0)
    found = fresh.record("r1", key)
    assert found is not None and found.key == key
    assert sorted(r.task_id for r in fresh.records("r1")) == ["a", "b", "c"]
    assert "names the wrong place in records.jsonl for 1 attempts" in str(fresh.problems)


def test_repair_reads_no_fifo(tmp_path: Path) -> None:
    """A summary.json that is a FIFO (reading it would block) does not hang `agenteval repair`:
    run.json is rebuilt from the records."""
    store = Store(tmp_path / "agenteval")
    store.create_run("r1", DS, {"override": None})
    store.commit("r1", record("a", 0, "pass"))
    store.close()
    folder = store.runs_dir / "r1"
    (folder / "run.json").unlink()
    os.mkfifo(folder / "summary.json")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval.cli", "repair", "r1", "--cache-dir", tmp_path],
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard
    )
    assert done.returncode == 0, done.stderr
    assert "run.json rebuilt from 1 stored attempts: dataset ds unknown" in done.stdout


def test_a_deleted_index_is_rebuilt_from_the_records(store: Store) -> None:
    """index.jsonl deleted, records.jsonl intact: every attempt is re-indexed, and the next
    session that takes the run writes the index again."""
    (store.runs_dir / "r1/index.jsonl").unlink()
    store.close()
    rerun = Store(store.root)
    rows, bad = rerun.index("r1")
    assert sorted(r.task_id for r in rows) == ["a", "b", "c"]
    assert "has no line for 3 attempts records.jsonl holds" in bad[0].problem
    rerun.claim_run("r1")
    rerun.close()
    fresh = Store(store.root)
    assert len(fresh.index("r1")[0]) == 3 and not fresh.problems
