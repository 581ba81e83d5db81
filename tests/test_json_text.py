"""The direct C JSON encoder (`core.text.json_encoder`) writes what `json.dumps` writes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_agenteval.core.text import clean_text, json_encoder, json_safe

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_same_text_as_json_dumps(value: Any) -> None:
    """Records, index lines and digests keep their bytes: the same text as `json.dumps` with
    the same options, lone surrogates, non-ASCII, NaN and huge integers included."""
    assert json_encoder()(value) == json.dumps(value, ensure_ascii=False)
    digest = json_encoder(sort_keys=True, default=str)
    assert digest(value) == json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def test_default_and_circular_references() -> None:
    """Unknown objects go through `default`; a circular value is refused, every time (the
    marker table is not left dirty by a failed call)."""
    assert json_encoder(default=str)([1j]) == '["1j"]'
    looped: list[Any] = []
    looped.append(looped)
    encode = json_encoder()
    for _ in range(2):
        with pytest.raises(ValueError, match="Circular reference"):
            encode(looped)
    assert encode({"a": [1.5, None]}) == '{"a": [1.5, null]}'


SAFE_INPUTS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.complex_numbers(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text() | st.integers() | st.booleans(), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(SAFE_INPUTS)
def test_json_safe_is_the_json_round_trip(value: Any) -> None:
    """`json_safe` copies plain values in one walk and gives what the JSON round trip gives
    (lone surrogates replaced, tuples as lists, other keys spelt as JSON spells them,
    unknown objects as their str)."""
    expected = json.loads(clean_text(json.dumps(value, ensure_ascii=False, default=str)))
    found = json_safe(value)
    assert json.dumps(found, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)
    if isinstance(value, list):
        assert found is not value  # a copy: an agent's later change does not reach a record


def test_json_safe_keeps_what_json_cannot_hold_as_its_text() -> None:
    """A value that holds itself, a key JSON has no form for, nesting too deep to walk: kept
    as its text (a record is never lost to what an agent or a grader gave)."""
    looped: dict[str, Any] = {}
    looped["self"] = looped
    assert json_safe(looped) == "{'self': {...}}"
    assert json_safe({(1, 2): "pair"}) == "{(1, 2): 'pair'}"
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert json_safe(deep) == "<a list nested too deep to store>"


def test_a_graders_details_are_stored_as_plain_json() -> None:
    """A plugin grader's details may hold any object, or themselves: the record keeps them as
    JSON (objects as their text), never fails to be written."""
    from helpers import aid
    from pytest_agenteval.core.model import AgentResult, Verdict
    from pytest_agenteval.core.records import new_record

    looped: dict[str, Any] = {"score": 0.5}
    looped["self"] = looped
    verdicts = [
        Verdict("odd", True, "ok", 1.0, {"when": complex(1, 2), "tags": {"a"}}),
        Verdict("loop", True, "ok", 1.0, looped),
    ]
    record = new_record(
        key=aid("d", "t", 0),
        digest="x",
        run_digest="y",
        agent={},
        tags=(),
        status="pass",
        verdicts=verdicts,
        result=AgentResult(output="4"),
        started_at=0.0,
        duration=0.1,
    )
    stored = json.loads(record.to_text())["verdicts"]
    assert stored[0]["details"] == {"when": "(1+2j)", "tags": "{'a'}"}
    assert stored[1]["details"] == {"details": "{'score': 0.5, 'self': {...}}"}
