"""Browser fixtures: Debian's Chromium driven by Playwright.

On a learner's machine without Chromium the browser tests skip, saying how to enable them; under
``CI=true`` a missing browser is a failure, since CI installs it (``.ci/run``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "browser"
HOW_TO_ENABLE = ("no Chromium found: install it (Debian/Ubuntu: `sudo apt-get install chromium`) "
                 "or set MLSYS_LAB_CHROMIUM=/path/to/chrome to run the browser tests")


def chromium_path() -> str | None:
    explicit = os.environ.get("MLSYS_LAB_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def _missing(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI must run the browser tests)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser():
    executable = chromium_path()
    if executable is None:
        _missing(HOW_TO_ENABLE)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: `pip install -e '.[test]'`")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
