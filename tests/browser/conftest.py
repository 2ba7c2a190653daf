"""A real JupyterLab server and Debian's Chromium, driven by Playwright."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server on a fresh root dir, fresh settings (light theme), no browser."""
    root = tmp_path_factory.mktemp("lab")
    token = secrets.token_hex(16)
    port = _free_port()
    env = dict(os.environ,
               JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"),
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"))
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--ServerApp.port={port}",
           "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", "--LabApp.expose_app_in_browser=True",
           f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"jupyter lab did not start:\n{(root / 'server.log').read_text()}")
            time.sleep(0.5)
    yield {"base": base, "token": token, "root": root}
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Debian's chromium is required at {CHROMIUM} (./dev.sh test installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    context.close()
