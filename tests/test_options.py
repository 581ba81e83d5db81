"""Option values are parsed once, the same way, by the plugin and by the `agenteval` command."""

from __future__ import annotations

import pytest

from pytest_agenteval.cli import main


@pytest.mark.parametrize(
    ("args", "plugin_option", "message"),
    [
        (
            ["--task-rule", "most"],
            "--agenteval-task-rule",
            "'most' is not 'any', 'all' or a pass rate in (0, 1]",
        ),
        (
            ["--pass-k", "1,x"],
            "--pass-k",
            "'1,x' is not a comma-separated list of positive integers",
        ),
    ],
)
def test_report_rejects_bad_values_like_the_plugin(
    args: list[str],
    plugin_option: str,
    message: str,
    capsys: pytest.CaptureFixture[str],
    pytester: pytest.Pytester,
) -> None:
    """`agenteval report` quotes the bad value and exits 2, as pytest does for the same option."""
    with pytest.raises(SystemExit) as exit_info:
        main(["report", "some-run", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    plugin = pytester.runpytest("--agenteval", "ds", plugin_option, args[1])
    assert plugin.ret == pytest.ExitCode.USAGE_ERROR
    plugin.stderr.fnmatch_lines([f"*{message}*"])


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_option(flag: str, pytester: pytest.Pytester) -> None:
    """`pytest --help` and `-h` format every option's help text (argparse %-formats each one)
    and print each ini twin's help as it is: `(95%)` in both sections, never `%%`."""
    result = pytester.runpytest_subprocess("-p", "agenteval", flag)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    options, ini = result.stdout.str().split("[pytest] configuration options")
    assert "significantly (95%)" in options and "significantly (95%)" in ini
    assert "%%" not in result.stdout.str()
