"""A real JupyterLab server and Debian's Chromium, driven by Playwright."""

from __future__ import annotations

from pathlib import Path

import pytest

from labdriver import CHROMIUM, launch_chromium, running_lab


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server on a fresh root dir, fresh settings (light theme), no browser."""
    with running_lab(tmp_path_factory.mktemp("lab")) as server:
        yield server


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian's chromium is required at {CHROMIUM} (./dev.sh test installs it)")
    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()
