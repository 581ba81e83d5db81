"""Unknown keys in a dataset's YAML: each says the key it likely misspells, or the keys allowed
there; a grader's plain `on:` option is the `on` key (YAML 1.1 reads it as a boolean)."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import DatasetMaker
from pytest_agenteval.cli import main
from pytest_agenteval.core.model import Manifest
from pytest_agenteval.sources.yamlfile import _fields_at


def test_misspelt_keys_inside_providers_and_pricing_get_a_did_you_mean(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt key below a dict of models (`providers: {NAME: ...}`, `pricing: {MODEL:
    ...}`) gets a did-you-mean, and no apart "missing" line for the field it misspells."""
    root = dataset({"t.yaml": "input: q\nexpected: ok\n"})
    (root / "agenteval.yaml").write_text(
        "name: ds\n"
        "agent: agent:run\n"
        "providers:\n"
        "  local:\n"
        "    openai:\n"
        "      base_ulr: http://127.0.0.1:9/v1\n"
        "pricing:\n"
        "  scripted: {input_per_mtoks: 1, output_per_mtok: 2}\n"
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "ds/agenteval.yaml:6: at providers.local.openai.base_ulr: unknown key 'base_ulr'\n"
        "Hint: did you mean 'base_url'?\n"
    ) in out
    assert (
        "ds/agenteval.yaml:8: at pricing.scripted.input_per_mtoks: unknown key "
        "'input_per_mtoks'\nHint: did you mean 'input_per_mtok'?\n"
    ) in out
    assert "missing required field 'input_per_mtok'" not in out


def test_a_provider_kind_that_does_not_exist_names_the_kinds(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`providers: {local: {gemini: ...}}` says a provider's kinds are `openai:` and
    `anthropic:`; a near miss (`opneai`) gets a did-you-mean instead."""
    root = dataset({"t.yaml": "input: q\nexpected: ok\n"})
    (root / "agenteval.yaml").write_text(
        "name: ds\n"
        "agent: agent:run\n"
        "providers:\n"
        "  local: {gemini: {base_url: http://127.0.0.1:9/v1}}\n"
        "  other: {opneai: {base_url: http://127.0.0.1:9/v1}}\n"
    )
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert (
        "ds/agenteval.yaml:4: at providers.local.gemini: unknown key 'gemini'\n"
        "Hint: a provider's kind is `openai:` or `anthropic:`"
    ) in out
    assert (
        "ds/agenteval.yaml:5: at providers.other.opneai: unknown key 'opneai'\n"
        "Hint: did you mean 'openai'?\n"
    ) in out


def test_an_unknown_key_far_from_any_lists_the_few_keys_allowed(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown key close to no field lists the keys allowed there when they are few (a
    task file's `budget:`), and lists nothing where there are many (a task's own keys)."""
    root = dataset({})
    (root / "t.yaml").write_text("input: q\nexpected: ok\nbudget: {zzz: 1}\nqqqqq: 2\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    (budget,) = re.findall(r"at budget\.zzz: unknown key 'zzz'\nHint: keys here: (.*)\n", out)
    assert "max_cost" in budget.split(", ")
    assert re.search(r"at qqqqq: unknown key 'qqqqq'\n(?!Hint)", out)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["providers", "pricing"]),
    st.text(string.ascii_lowercase + "_", min_size=1, max_size=6),
)
def test_every_model_below_a_dict_has_its_fields_found(section: str, name: str) -> None:
    """Whatever a user names a provider or a priced model, the keys allowed below it are
    found (the did-you-mean's choices), and the provider's kinds are among them."""
    fields = _fields_at(Manifest, (section, name))
    assert fields
    if section == "providers":
        assert {"openai", "anthropic"} <= set(fields)
        assert "base_url" in _fields_at(Manifest, (section, name, "openai"))
    else:
        assert "input_per_mtok" in fields


def test_a_graders_plain_on_key_is_its_on_option(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """`judge: {rubric: ..., on: trajectory}` validates as written (YAML 1.1 reads `on` as
    True), in both grader spellings; a grader that takes no `on` names it an unknown key."""
    root = dataset({})
    (root / "agenteval.yaml").write_text(
        "name: ds\nagent: agent:run\njudge: {model: m, base_url: http://127.0.0.1:9/v1}\n"
    )
    (root / "t.yaml").write_text(
        "input: q\n"
        "graders:\n"
        '  - judge: {rubric: "It read the failing test first.", on: trajectory}\n'
        "  - {type: judge, rubric: r, on: output}\n"
    )
    assert main(["validate", str(root)]) == 0, capsys.readouterr().out
    capsys.readouterr()
    (root / "t.yaml").write_text("input: q\ngraders:\n  - contains: {any: [a], on: x}\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "ds/t.yaml:3: at graders[0]: unknown key 'on'" in out
    assert "is not text" not in out


def test_an_unknown_key_beside_a_tasks_list_gets_a_hint(
    dataset: DatasetMaker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key beside a file's `tasks:` list gets a did-you-mean (`taks`), or is told the file
    holds only its tasks (`retry:` belongs in each task)."""
    root = dataset({})
    (root / "t.yaml").write_text("tasks:\n  - {id: a, input: q, expected: ok}\ntaks: 1\n")
    assert main(["validate", str(root)]) == 1
    assert "ds/t.yaml:3: at taks: unknown key 'taks'\nHint: did you mean 'tasks'?\n" in (
        capsys.readouterr().out
    )
    (root / "t.yaml").write_text("tasks:\n  - {id: a, input: q, expected: ok}\nretry: {max: 1}\n")
    assert main(["validate", str(root)]) == 1
    out = capsys.readouterr().out
    assert "ds/t.yaml:3: at retry: unknown key 'retry'\nHint: a file with a `tasks:` list" in out
