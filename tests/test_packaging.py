"""What setup.cfg promises holds: the Python the code needs, and the torch range CI tests."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _options() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config["options"]


def _pinned(path: Path, package: str) -> str:
    found = re.search(rf"^{package}==(\S+)$", path.read_text(), flags=re.M)
    assert found, f"{path.name} pins no {package}"
    return found.group(1)


def _vermin(*args: str) -> subprocess.CompletedProcess:
    command = str(Path(sys.executable).with_name("vermin"))  # its script, beside this Python
    return subprocess.run([command, "--no-tips", *args, str(ROOT / "torchgraphrec")],
                          capture_output=True, text=True, timeout=300)


def test_python_requires_is_what_the_code_needs() -> None:
    vermin = _vermin("--violations", "-t=3.9-")
    assert vermin.returncode == 0, vermin.stdout + vermin.stderr
    minimum = _vermin().stdout
    found = re.search(r"Minimum required versions: (\d+\.\d+)", minimum)
    assert found, minimum
    assert _options()["python_requires"].strip() == f">={found.group(1)}"


def test_the_torch_floor_is_the_oldest_torch_ci_tests() -> None:
    requires = _options()["install_requires"]
    floor = re.search(r"torch>=(\S+)", requires)
    assert floor, requires
    oldest = _pinned(ROOT / ".ci" / "torch-oldest.txt", "torch")
    assert oldest.startswith(floor.group(1) + ".") or oldest == floor.group(1)


@pytest.mark.parametrize("leg", ["torch-oldest.txt", "torch-middle.txt", "torch-newest.txt"])
def test_the_readme_matrix_names_each_torch_ci_tests(leg: str) -> None:
    version = _pinned(ROOT / ".ci" / leg, "torch")
    readme = (ROOT / "README.rst").read_text()
    matrix = readme.split("Tested torch releases")[1].split(".. list-table::")[1]
    table = matrix.split("\n\n")[1]  # after the table's options
    assert f"* - torch {version}\n" in table


def test_ci_runs_each_leg() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    assert "constraints.txt" in script
    for leg in ("torch-oldest.txt", "torch-middle.txt", "torch-newest.txt"):
        assert f".ci/{leg}" in script
