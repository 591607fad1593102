"""JupyterLab as `make lab` starts it, driven by a real browser: a spike opened, Run All from the menu, saved.

    .venv/bin/pytest tests/test_lab.py      # needs `make install EXTRAS=lab` (JupyterLab, Playwright) and Chromium

Playwright for Python drives the distribution's Chromium (/usr/bin/chromium, or CHROMIUM=path): Playwright's own
browser download is not used. Where JupyterLab, Playwright or Chromium is missing the test skips, naming what. The
notebook is a copy in tmp_path, so the run never touches the repository's files; the kernel is registered under the
name the notebooks declare ("composer"), as `make lab` does, in a Jupyter data folder of the test's own.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time

import httpx
import nbformat
import pytest

from composer import progress, report
from composer.paths import NOTEBOOKS
from ports import free_port

SPIKE = "001-teacher-replay-cost"  # Run All in about 30 s at its defaults, and its replay draws a progress bar
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
# Hang guards only (no time is asserted): a loaded 2-core machine ran 001's cells in 4x their idle time.
START_S, RUN_S = 120, 600


def _needs():
    """Skip naming what is missing; COMPOSER_REQUIRE_BROWSER=1 (.ci/run sets it after installing them) fails."""
    missing = [what for what, absent in (
        ("JupyterLab is not installed (make install EXTRAS=lab)", importlib.util.find_spec("jupyterlab") is None),
        ("Playwright is not installed (make install EXTRAS=lab)", importlib.util.find_spec("playwright") is None),
        ("no Chromium on this machine (apt-get install chromium, or CHROMIUM=path)", CHROMIUM is None)) if absent]
    if missing and os.environ.get("COMPOSER_REQUIRE_BROWSER") == "1":
        pytest.fail("COMPOSER_REQUIRE_BROWSER=1 but: " + "; ".join(missing))
    if missing:
        pytest.skip("; ".join(missing))


@pytest.fixture
def lab(tmp_path):
    """`jupyter lab` on a free loopback port with a token, serving a copy of the spike: (url, notebook path)."""
    _needs()
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy(NOTEBOOKS / f"{SPIKE}.ipynb", folder)
    data = tmp_path / "jupyter"
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(data), "--name", "composer",
                    "--display-name", "Python (composer)"], check=True, capture_output=True)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    env = {**os.environ, "JUPYTER_PATH": str(data / "share" / "jupyter"), "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    env.pop(progress.ENV, None)  # a researcher's session: bars into the cells
    port, token = free_port(), "composer-test-token"
    log = tmp_path / "lab.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
         "--FileContentsManager.post_save_hook=composer.lab.post_save",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert server.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/api/status", params={"token": token}, timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "JupyterLab did not answer: " + log.read_text()[-3000:]
            time.sleep(0.5)
        yield f"{url}/lab/tree/{SPIKE}.ipynb?token={token}", folder / f"{SPIKE}.ipynb"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def test_a_spike_runs_in_jupyterlab_in_a_real_browser(lab):
    """Open the spike (no kernel dialog: its kernel is found), Run All from the Run menu, wait for the verdict in the
    banner, save: every code cell ran, none raised, the banner is the first output, and the replay's progress bar
    is in the notebook (interactive: tqdm in the cell)."""
    from playwright.sync_api import sync_playwright

    url, saved = lab
    verdicts = "|".join(report.VERDICTS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page()
            page.goto(url)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=START_S * 1000)
            # the kernel is up when the toolbar names it and says it is idle
            page.locator(".jp-Toolbar-kernelName", has_text="Python (composer)").wait_for(timeout=START_S * 1000)
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=START_S * 1000)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()
            banner = page.locator(f"#{report.BANNER_ID}")
            banner.filter(has_text=re.compile(verdicts)).wait_for(timeout=RUN_S * 1000)
            page.wait_for_function("""() => {
                const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
                return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
            }""", timeout=RUN_S * 1000)
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=RUN_S * 1000)
            page.keyboard.press("Control+s")
            page.locator(".jp-mod-dirty").wait_for(state="detached", timeout=START_S * 1000)
        finally:
            browser.close()
    nb = nbformat.read(saved, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), "a code cell did not run"
    errors = [out for cell in code for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{errors[0].ename}: {errors[0].evalue}" if errors else ""
    first = next(out for cell in code for out in cell.outputs)
    assert re.search(verdicts, first.get("data", {}).get("text/html", "")), "the first output is the verdict banner"
    streams = "".join(out.get("text", "") for cell in code for out in cell.outputs if out.output_type == "stream")
    assert re.search(r"teacher replay: 100%\|.*\| \d+/\d+ \[", streams), "the replay's progress bar is in its cell"
