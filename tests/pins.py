"""The pinned dependency set as pyproject.toml and environment.yml each state it (name -> version)."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def pinned(requirements) -> dict[str, str]:
    """['mpich==5.0.2; sys_platform == ...', ...] -> {'mpich': '5.0.2', ...}; names normalised."""
    pairs = (r.split(";")[0].strip().split("==") for r in requirements)
    return {name.strip().lower().replace("_", "-"): version.strip() for name, version in pairs}


def pyproject_pins() -> dict[str, str]:
    return pinned(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def environment_pins(path: Path = ROOT / "environment.yml") -> dict[str, str]:
    """The ``name==version`` lines of the file's pip section."""
    pip_section = path.read_text().split("- pip:", 1)[1]
    return pinned(re.findall(r"^\s+-\s+(\S+==\S+)\s*$", pip_section, re.MULTILINE))
