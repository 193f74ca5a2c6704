"""The wheel holds what the CLI runs: built from a copy of the sources and unpacked away from the checkout,
`policyforge bench` finds every benchmark inside it and runs one."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import importlib.util, json, sys
import policyforge
from policyforge.cli import benchmarks
origins = [importlib.util.find_spec(f"policyforge.bench.{name}").origin for name in benchmarks()]
print(json.dumps({"package": policyforge.__file__, "benchmarks": benchmarks(), "origins": origins}))
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The wheel's contents, unpacked: a stand-in for site-packages with no checkout around it."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "policyforge", source / "policyforge", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "dist", "./src"]
    built = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (work / "dist").glob("policyforge-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(work / "site")
    return work / "site"


def run_from(site: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_every_benchmark_is_in_the_wheel(site, tmp_path):
    result = run_from(site, tmp_path, "-c", PROBE)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert Path(found["package"]).is_relative_to(site)  # the unpacked wheel, not the checkout
    in_checkout = sorted(p.stem for p in (ROOT / "policyforge" / "bench").glob("*.py") if not p.stem.startswith("_"))
    assert found["benchmarks"] == in_checkout and "env_throughput" in in_checkout
    assert all(Path(origin).is_relative_to(site) for origin in found["origins"])


def test_policyforge_bench_runs_a_benchmark_from_the_wheel(site, tmp_path):
    # deploy-under-load imports control_loop, a sibling module: it must come from the wheel as well
    result = run_from(site, tmp_path, "-m", "policyforge.cli", "bench", "deploy-under-load", "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "--busy" in result.stdout and "--policy" in result.stdout
