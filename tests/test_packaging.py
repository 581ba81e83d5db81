"""The built package: an sdist and a wheel that twine accepts, and a wheel that works installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def run(*argv: str | Path, cwd: Path = ROOT, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if ok:
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An sdist and a wheel built from this checkout, offline (no build isolation)."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT)
    return out


def test_sdist_and_wheel_pass_twine_check(dist: Path) -> None:
    """Both artifacts exist, carry the one version string, and pass `twine check --strict`."""
    from pytest_agenteval import __version__

    wheel = next(dist.glob("*.whl"))
    sdist = next(dist.glob("*.tar.gz"))
    assert f"-{__version__}" in wheel.name and f"-{__version__}" in sdist.name
    run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)


def test_wheel_carries_assets_type_information_and_entry_points(dist: Path) -> None:
    """The HTML report's assets, py.typed, the pytest11 entry point and the command ship."""
    names = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
    assert "pytest_agenteval/py.typed" in names
    assert {"pytest_agenteval/reporting/assets/report.css"} <= set(names)
    assert "pytest_agenteval/reporting/assets/report.js" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(next(dist.glob("*.whl"))).read(entry_points).decode()
    assert "[pytest11]\nagenteval = pytest_agenteval.plugin" in text
    assert "agenteval = pytest_agenteval.cli:main" in text


def test_installed_wheel_runs_the_example_suite_and_writes_the_html_report(
    dist: Path, tmp_path: Path
) -> None:
    """A fresh venv with the wheel (not editable) runs the example suite, the HTML report and
    the `agenteval` command: package data, entry points and the script all ship."""
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    wheel = next(dist.glob("*.whl"))
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel)
    # The dependencies come from this environment (offline); a .pth adds its site-packages
    # *after* the venv's own, and does not run its .pth files (so no editable finder).
    venv_site = Path(
        run(python, "-c", "import site; print(site.getsitepackages()[0])").stdout.strip()
    )
    (venv_site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = run(python, "-c", "import pytest_agenteval; print(pytest_agenteval.__file__)")
    assert where.stdout.strip().startswith(str(venv_site)), where.stdout

    project = tmp_path / "project"
    shutil.copytree(ROOT / "example_suite", project / "example_suite")
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTEST_ADDOPTS", None)
    suite = subprocess.run(
        [python, "-m", "pytest", "--agenteval", "example_suite", "--agenteval-html", "report.html"],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert suite.returncode == 1, suite.stdout + suite.stderr  # some attempts fail on purpose
    assert "pass@1" in suite.stdout
    page = (project / "report.html").read_text()
    assets = ROOT / "src" / "pytest_agenteval" / "reporting" / "assets"
    for asset in ("report.css", "report.js"):  # inlined from the installed package's data
        assert (assets / asset).read_text().strip().splitlines()[-1] in page
    runs = subprocess.run(
        [venv / "bin" / "agenteval", "runs"], cwd=project, capture_output=True, text=True, env=env
    )
    assert runs.returncode == 0 and "example" in runs.stdout, runs.stdout + runs.stderr
