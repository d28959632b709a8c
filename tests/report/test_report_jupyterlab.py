"""The report widget in JupyterLab, in Chromium: a notebook displaying two recordings runs,
both widgets draw their report, and the layout engine is loaded once for the page."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

import torchgraphrec as tgr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A JupyterLab server of our own on a free port, its kernels importing the
    torchgraphrec under test; stopped (by its process id) at the end."""
    pytest.importorskip("jupyterlab")
    pytest.importorskip("anywidget")
    nbformat = pytest.importorskip("nbformat")
    folder = tmp_path_factory.mktemp("lab")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in (
        "import torch, torchgraphrec as tgr\n"
        "a = tgr.record(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), torch.randn(2, 4))\n"
        "a",
        "b = tgr.record(torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.GELU()), torch.randn(2, 4))\n"
        "b")]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, folder / "two.ipynb")
    port = _free_port()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(folder / ".config"),
           "JUPYTER_RUNTIME_DIR": str(folder / ".runtime"),
           "JUPYTERLAB_WORKSPACES_DIR": str(folder / ".workspaces"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(tgr.__file__).parent.parent),
                                                       os.environ.get("PYTHONPATH")]))}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
         f"--ServerApp.root_dir={folder}", "--LabApp.expose_app_in_browser=True",
         "--ServerApp.disable_check_xsrf=True", "--allow-root",
         # offline: no extension index, no update check, no news
         "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.news_url=None"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to a minute on a busy machine
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail("jupyter lab exited at start")
                time.sleep(0.2)
        else:
            pytest.fail("jupyter lab did not answer")
        yield url, folder
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def test_the_widget_draws_in_jupyterlab(browser, lab, tmp_path: Path) -> None:
    url, _ = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        page.goto(f"{url}/lab/tree/two.ipynb")
        page.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook')",
                               timeout=120_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        # the kernel is ready when its status says idle; then run every cell
        page.wait_for_function(
            "document.querySelector('.jp-Notebook') && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
            " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
            timeout=120_000)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        reports = page.locator(".jp-OutputArea-output .tgr-report[data-ready][data-engine=ready]")
        reports.nth(1).wait_for(timeout=120_000)
        assert reports.count() == 2
        assert page.evaluate("globalThis.__tgrEngineLoads") == 1  # once for the page
        assert page.locator(".jp-OutputArea-output .tgr-report .tgr-canvas svg").count() == 2
        titles = page.locator(".jp-OutputArea-output .tgr-report .tgr-title").all_text_contents()
        assert titles == ["Sequential", "Sequential"]
        labels = page.locator(".jp-OutputArea-output .tgr-report .tgr-canvas").all_text_contents()
        assert "ReLU" in labels[0] and "GELU" in labels[1]
        reports.nth(0).scroll_into_view_if_needed()
        page.screenshot(path=tmp_path / "jupyterlab-widget.png")
    finally:
        context.close()
    assert not [p for p in problems if "tgr" in p.lower()], problems
