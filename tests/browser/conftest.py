"""A real JupyterLab server and Debian's Chromium, driven by Playwright."""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import urllib.parse
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


# The JupyterLab-version tests (test_lab_versions.py): another environment, with an older JupyterLab,
# into which forgeviz's wheel is installed as a user would. Kept between runs in an ignored folder.
ROOT = Path(__file__).resolve().parents[2]
LAB_ENVS = ROOT / ".venv-labs"


def _run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if out.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


@pytest.fixture(scope="session")
def forgeviz_wheel(tmp_path_factory) -> Path:
    """The wheel this environment's forgeviz was installed from (./dev.sh builds it fresh each run and
    installs it), if pip recorded one and it is still that file; else one built now from this tree."""
    dist = importlib.metadata.distribution("forgeviz")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    url, wanted = direct.get("url", ""), direct.get("archive_info", {}).get("hashes", {}).get("sha256")
    if url.startswith("file://") and url.endswith(".whl") and wanted:
        wheel = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
        if wheel.exists() and hashlib.sha256(wheel.read_bytes()).hexdigest() == wanted:
            return wheel
    out = tmp_path_factory.mktemp("wheel")
    print(f"forgeviz was not installed from a wheel ({url or 'no direct_url.json'}): building one from {ROOT}")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT])
    return next(out.glob("forgeviz-*.whl"))


@pytest.fixture(scope="session")
def lab_env(forgeviz_wheel):
    """``lab_env(pins)``: the python of a venv under .venv-labs/ holding exactly ``pins`` (e.g.
    ``{"jupyterlab": "4.0.2"}``), made once and kept; forgeviz is installed into it from the wheel
    each session, as a user would (``pip install forgeviz-….whl`` beside their JupyterLab)."""
    return lambda pins: _lab_env(pins, forgeviz_wheel)


def _lab_env(pins: dict[str, str], wheel: Path) -> Path:
    name = "-".join(f"{k}-{v}" for k, v in sorted(pins.items()))
    env = LAB_ENVS / name
    python = env / "bin" / "python"
    marker = env / "forgeviz-test-env.json"
    torch = importlib.metadata.version("torch").split("+")[0]
    made = {"pins": pins, "torch": torch, "python": sys.version_info[:2]}
    LAB_ENVS.mkdir(exist_ok=True)
    with open(LAB_ENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another pytest of this checkout may be making it
        if not marker.exists() or json.loads(marker.read_text()) != json.loads(json.dumps(made)):
            shutil.rmtree(env, ignore_errors=True)
            _run([sys.executable, "-m", "venv", env])
            # torch first, exactly this environment's: any other spec pulls the multi-GB CUDA build
            _run([python, "-m", "pip", "install", "-q", f"torch=={torch}", "numpy"])
            _run([python, "-m", "pip", "install", "-q", *(f"{k}=={v}" for k, v in pins.items())])
            marker.write_text(json.dumps(made))
        _run([python, "-m", "pip", "uninstall", "-q", "-y", "forgeviz"])
        _run([python, "-m", "pip", "install", "-q", wheel])
        _run([python, "-m", "forgeviz._capture.native"])  # the memory tracker, as ./dev.sh builds it
    return python
