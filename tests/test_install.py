"""The install: pip's resolver on the live extra (vLLM), so a pin change that breaks the GPU path fails here.

    .venv/bin/pytest tests/test_install.py

It asks the package registry (PyPI), which CI reaches; nothing is installed: `--dry-run`, and wheels' metadata read
with HTTP range requests (vLLM's wheel is 315 MB and PyPI serves no separate metadata file for it).
"""

import json
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import version

from packaging.version import Version

from composer.paths import ROOT

TRL_VLLM = (Version("0.22.0"), Version("0.31.0"))  # the vLLM releases TRL 1.16 supports (trl/import_utils.py)


def resolve(project) -> tuple[dict, str]:
    """{name: version} pip would install for the project's live extra, and pip's output (which names a conflict)."""
    report = project / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--use-feature=fast-deps",
         "--report", str(report), f"{project}[live]"], capture_output=True, text=True, timeout=600)
    if run.returncode:
        return {}, run.stdout + run.stderr
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}, ""


def live_extra() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["live"]


def test_the_live_extra_resolves_with_vllm_on_the_base_pins(tmp_path):
    for name in ("pyproject.toml", "README.md"):  # all a metadata build reads
        shutil.copy(ROOT / name, tmp_path / name)
    versions, output = resolve(tmp_path)
    assert versions, f"pip cannot install .[live]:\n{output[-3000:]}"
    assert TRL_VLLM[0] <= Version(versions["vllm"]) <= TRL_VLLM[1], versions["vllm"]
    for name in ("torch", "transformers", "trl", "accelerate", "peft", "openenv-core", "verifiers", "swebench"):
        # the same releases the base install runs the suite on (a local label such as +cpu aside)
        assert Version(versions[name]).public == Version(version(name)).public, (name, versions[name], version(name))


def test_a_pin_that_breaks_vllm_fails_naming_the_conflict(tmp_path):
    # the pin this project had before the live extra existed, in a project of just that and the extra
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "pins"\nversion = "0"\ndependencies = ["fastapi>=0.165,<0.166"]\n'
        f'[project.optional-dependencies]\nlive = {json.dumps(live_extra())}\n')
    versions, output = resolve(tmp_path)
    assert not versions and "ResolutionImpossible" in output
    vllm = next(r for r in live_extra() if r.startswith("vllm==")).replace("==", " ")
    assert f"{vllm} depends on fastapi<0.137.0" in output
