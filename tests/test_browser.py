"""The workbench as people see it: JupyterLab in a real browser (Debian's chromium, driven by Playwright),
a notebook run through the UI, the live dashboard drawing and gaining points while the sink runs,
and its final state left as a picture when it stops. Screenshots go to the test's output folder."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
import requests
from test_notebooks import KERNEL, mentioning

from sinklab.stack.process import LOOPBACK, free_port, stop_pid
from sinklab.viz.render import chromium

pytestmark = pytest.mark.spark

OUTPUT = Path(__file__).resolve().parent.parent / ".sinklab" / "test-output" / "browser"
# Points of the dashboard's live figure: plotly draws each marker as a path.point.
POINTS = ".jp-OutputArea-output .js-plotly-plot .scatterlayer path.point"

CELLS = [
    """from sinklab import viz
from sinklab.generators import PizzaGenerator
from sinklab.sink import IcebergSink
from sinklab.stack import Stack

stack = Stack.embedded(WORKDIR, connect=False)
stack.create_topic("pizzas", partitions=2)
PizzaGenerator(seed=1).produce(stack, "pizzas", count=200, partitions=2).wait()
sink = IcebergSink(stack, {"name": "browser", "config": {
    "topics": "pizzas", "iceberg.tables": "rpc.pizzas", "iceberg.tables.auto-create-enabled": "true",
    "iceberg.control.commit.interval-ms": "1000", "value.converter.schemas.enable": "false"}})
sink.run_once()  # Spark's warm-up, before the dashboard""",
    """sink.start()
dashboard = viz.Dashboard(sink, every_s=1.0)
dashboard.start()
dashboard""",
    """run = PizzaGenerator(seed=2).produce(stack, "pizzas", count=3000, rate=200, partitions=2)
run.wait()
viz.wait_caught_up(sink)
sink.stop()
dashboard.stop()
print("DONE", sink.status().cycles, "cycles")""",
    "stack.close()",
]


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """JupyterLab on a free loopback port with a token, serving a folder with the test's notebook;
    stopped by PID (SIGTERM, wait, SIGKILL) whatever the test did."""
    if chromium() is None:
        pytest.fail("no chromium on PATH: `make tools` installs Debian's chromium")
    workdir = tmp_path / "stack"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (sinklab)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c.replace("WORKDIR", repr(str(workdir)))) for c in CELLS]
    root = tmp_path / "lab"
    root.mkdir()
    nbformat.write(nb, root / "dashboard.ipynb")
    port, token = free_port(), secrets.token_hex(16)
    log = (tmp_path / "jupyterlab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={LOOPBACK}", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--LabApp.news_url=", "--LabServerApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, "JUPYTER_NO_CONFIG": "1"})
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/api/status", params={"token": token}, timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, (tmp_path / "jupyterlab.log").read_text()
            assert time.monotonic() < deadline, "JupyterLab did not answer within 60 s"
            time.sleep(0.3)
        yield url, token, root / "dashboard.ipynb"
    finally:
        stop_pid(proc.pid, timeout=20)
        log.close()
        # The kernel stops with the server; a stack its notebook did not close is stopped here.
        deadline = time.monotonic() + 15
        while (left := mentioning(str(workdir))) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            stop_pid(pid, timeout=10, group=False)


def test_the_dashboard_moves_in_jupyterlab(lab: tuple[str, str, Path]) -> None:
    from playwright.sync_api import sync_playwright

    url, token, notebook = lab
    OUTPUT.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []

    def shot(page: object, name: str) -> None:
        path = OUTPUT / f"{len(shots) + 1:02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        shots.append(path)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.goto(f"{url}/lab/tree/dashboard.ipynb?token={token}")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-item[data-command='notebook:run-all-cells']").click()

            # Drawn: the live figure's SVG, then more points as the sink commits.
            page.wait_for_selector(".jp-OutputArea-output .js-plotly-plot svg.main-svg", timeout=180_000)
            shot(page, "dashboard-drawn")
            counts = [page.locator(POINTS).count()]
            deadline = time.monotonic() + 120
            while counts[-1] <= counts[0] + 2 and time.monotonic() < deadline:
                time.sleep(2)
                counts.append(page.locator(POINTS).count())
            shot(page, "dashboard-moving")
            assert counts[-1] > counts[0] + 2, f"the dashboard gained no points: {counts}"

            # Stopped: the dashboard's cell keeps the final state...
            page.locator(".jp-OutputArea-output pre", has_text="DONE").wait_for(timeout=180_000)
            page.locator(".jp-OutputArea-output .js-plotly-plot .gtitle", has_text="browser: STOPPED").first \
                .wait_for(timeout=60_000)
            shot(page, "dashboard-final")
            # ...and saved, with a picture of it for viewers without JavaScript (an export, GitHub).
            page.locator(".jp-Notebook").first.click()
            page.keyboard.press("Control+s")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                saved = nbformat.read(notebook, as_version=4)
                dashboard_cell = saved.cells[1]
                if any("image/png" in o.get("data", {}) for o in dashboard_cell.outputs):
                    break
                time.sleep(1)
            assert any("image/png" in o.get("data", {}) and "STOPPED" in json.dumps(o["data"].get(
                "application/vnd.plotly.v1+json", {}).get("layout", {}).get("title", {}))
                for o in dashboard_cell.outputs), dashboard_cell.outputs
        finally:
            browser.close()
    print("\nscreenshots:", *map(str, shots), sep="\n  ")
