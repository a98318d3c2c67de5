"""The workbench as people see it: JupyterLab in a real browser (Debian's chromium, driven by Playwright),
a notebook run through the UI, the live dashboard drawing and gaining points while the sink runs,
and its final state left as a picture when it stops. Screenshots go to the test's output folder."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import requests
from helpers import stop_leftovers
from test_notebooks import KERNEL

from sinklab.stack.process import LOOPBACK, free_port, stop_pid
from sinklab.viz.render import chromium

pytestmark = pytest.mark.spark

OUTPUT = Path(__file__).resolve().parent.parent / ".sinklab" / "test-output" / "browser"
# Points of the dashboard's live figure: plotly draws each marker as a path.point.
POINTS = ".jp-OutputArea-output .js-plotly-plot .scatterlayer path.point"
SEEN = "seen"  # the file the test writes in the notebook's folder once it saw the dashboard move

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
    """import pathlib, time
# The stream runs until the test has seen the dashboard move (it writes a file), at most 5 minutes: on a
# busy machine the browser draws the first figure late, after a stream of fixed length may have ended.
run = PizzaGenerator(seed=2).produce(stack, "pizzas", count=60_000, rate=200, partitions=2)
deadline = time.monotonic() + 300
while not pathlib.Path(SEEN_FILE).exists() and not run.done and time.monotonic() < deadline:
    time.sleep(0.5)
run.stop()
run.raise_for_errors()
viz.wait_caught_up(sink)
sink.stop()
dashboard.stop()
print("DONE", sink.status().cycles, "cycles")
dashboard.figure()  # the final state, as an ordinary output (with a PNG for exports)""",
    "stack.close()",
]


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    with jupyterlab(tmp_path, CELLS) as served:
        yield served


@contextlib.contextmanager
def jupyterlab(tmp_path: Path, cells: list[str]) -> Iterator[tuple[str, str, Path]]:
    """JupyterLab on a free loopback port with a token, serving a folder with a notebook of ``cells``;
    stopped by PID (SIGTERM, wait, SIGKILL) whatever the test did."""
    if chromium() is None:
        pytest.fail("no chromium on PATH: `make tools` installs Debian's chromium")
    workdir = tmp_path / "stack"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python (sinklab)", "language": "python"}
    root = tmp_path / "lab"
    root.mkdir()
    seen = repr(str(root / SEEN))
    nb.cells = [nbformat.v4.new_code_cell(c.replace("WORKDIR", repr(str(workdir))).replace("SEEN_FILE", seen))
                for c in cells]
    nbformat.write(nb, root / "dashboard.ipynb")
    port, token = free_port(), secrets.token_hex(16)
    log = (tmp_path / "jupyterlab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={LOOPBACK}", f"--ServerApp.port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.port_retries=0",
         "--LabApp.news_url=", "--LabServerApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
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
        stop_leftovers(str(workdir))


def screenshots(test: str, shots: list[Path]) -> Any:
    """``shot(page, name)``: a screenshot into this test's output folder (emptied first), listed in ``shots``."""
    folder = OUTPUT / test
    shutil.rmtree(folder, ignore_errors=True)  # this run's screenshots only
    folder.mkdir(parents=True)

    def shot(page: Any, name: str) -> None:
        # A screenshot is for the reader, never what decides the test: under a loaded machine a
        # plotly page's full-page shot outlasted Playwright's 30 s (CI, stop 47), so it is the
        # viewport, bounded, and a shot not taken is said, not raised.
        path = folder / f"{len(shots) + 1:02d}-{name}.png"
        try:
            page.screenshot(path=str(path), timeout=15_000)
        except Exception as e:  # noqa: BLE001 - see above
            print(f"screenshot {name} not taken: {type(e).__name__}")
            return
        shots.append(path)
    return shot


@contextlib.contextmanager
def notebook_page(url: str, token: str, shot: Any) -> Iterator[Any]:
    """Debian's chromium on the served notebook, its cells run; a screenshot of a failure, the browser
    closed whatever the test did."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        try:
            run_all(page, url, token)
            yield page
        except BaseException:
            # shot() never raises, so the failure is what the report shows.
            shot(page, "failed")
            raise
        finally:
            browser.close()


def run_all(page: Any, url: str, token: str) -> None:
    """Open the served notebook in JupyterLab and run all its cells once its kernel is connected."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(f"{url}/lab/tree/dashboard.ipynb?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    # The kernel must be connected, or "Run All Cells" is dropped: its status bar reads Idle.
    page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=90_000)
    for _ in range(3):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:  # the first cell runs ([*]) or already ran ([1])
            page.locator(".jp-InputPrompt", has_text=re.compile(r"\[(\*|1)\]")).first.wait_for(
                state="attached", timeout=15_000)
            return
        except PlaywrightTimeout:
            continue


def test_the_dashboard_moves_in_jupyterlab(lab: tuple[str, str, Path]) -> None:
    url, token, notebook = lab
    shots: list[Path] = []
    shot = screenshots("dashboard", shots)

    with notebook_page(url, token, shot) as page:
        # Drawn: the live figure's SVG, then more points as the sink commits.
        page.wait_for_selector(".jp-OutputArea-output .js-plotly-plot svg.main-svg", timeout=180_000)
        shot(page, "dashboard-drawn")
        counts = [page.locator(POINTS).count()]
        deadline = time.monotonic() + 120
        while counts[-1] <= counts[0] + 2 and time.monotonic() < deadline:
            time.sleep(2)
            counts.append(page.locator(POINTS).count())
        shot(page, "dashboard-moving")
        # On failure, what the page says: the figure's title carries the sink's state, cycles and lag.
        said = page.locator(".jp-OutputArea-output .gtitle, .jp-OutputArea-output pre").all_text_contents()
        assert counts[-1] > counts[0] + 2, f"the dashboard gained no points: {counts}; the page says {said}"
        (notebook.parent / SEEN).touch()  # the notebook's stream may end now

        # Stopped: the live view refreshed once more, and the final state shows where it stopped...
        page.locator(".jp-OutputArea-output pre", has_text="DONE").wait_for(timeout=180_000)
        page.locator(".jp-OutputArea-output .js-plotly-plot .gtitle", has_text="browser: STOPPED").first \
            .wait_for(state="attached", timeout=60_000)
        shot(page, "dashboard-final")
        # The last cell ran: every output is in.
        page.locator(".jp-InputPrompt", has_text="[4]").first.wait_for(state="attached", timeout=120_000)
        shot(page, "notebook-done")
        # Saved, the cell that stopped it keeps figure()'s final state with its PNG, for viewers
        # without JavaScript (an export, GitHub).
        deadline = time.monotonic() + 60
        while True:
            page.locator(".lm-MenuBar-itemLabel", has_text="File").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Save Notebook").first.click()
            time.sleep(2)
            outputs = nbformat.read(notebook, as_version=4).cells[2].outputs
            figures = [o for o in outputs if "image/png" in o.get("data", {})]
            if figures or time.monotonic() > deadline:
                break
        assert [json.dumps(o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]).count("STOPPED")
                for o in figures] == [1], outputs
    print("\nscreenshots:", *map(str, shots), sep="\n  ")


PANEL_CELLS = [
    CELLS[0].replace('"iceberg.control.commit.interval-ms": "1000"', '"iceberg.control.commit.interval-ms": "30000"'),
    """sink.start()  # its first cycle at once, the next in 30 s
run = PizzaGenerator(seed=2).produce(stack, "pizzas", count=None, rate=100, partitions=2)
dashboard = viz.Dashboard(sink, every_s=1.0)
dashboard.start()
dashboard""",
    """panel = viz.ControlPanel(sink, production=run)
panel""",
    """import json, pathlib, threading, time

def watch() -> None:
    # In a thread: a running cell would hold the panel's widget messages back until it ends. Until someone
    # moves the interval (the test, in the browser), then until four commits came after it: what the kernel
    # saw goes to a file the test reads, once everything stopped. At most 5 minutes.
    deadline = time.monotonic() + 300
    while not sink.status().marks and time.monotonic() < deadline:
        time.sleep(0.2)
    tuned = sink.status().marks[0] if sink.status().marks else None
    times = []
    while tuned and len(times) < 4 and time.monotonic() < deadline:
        last = sink.status().last_commit
        if last and last["at"] > tuned["at"] and (not times or last["at"] != times[-1]):
            times.append(last["at"])
        time.sleep(0.1)
    time.sleep(3)  # a refresh or two of the dashboard with the mark
    run.stop()
    sink.stop()
    dashboard.stop()
    stack.close()
    pathlib.Path(SEEN_FILE).write_text(json.dumps({"mark": tuned, "commits": times,
                                                   "interval_ms": sink.config.commit_interval_ms}))

threading.Thread(target=watch, daemon=True).start()""",
]


def test_the_control_panel_turns_the_interval_in_jupyterlab(tmp_path: Path) -> None:
    # A person moves the interval slider beside the live dashboard: the running sink commits at the new
    # pace from its next cycle, and the dashboard marks the moment.
    shots: list[Path] = []
    shot = screenshots("control-panel", shots)
    with jupyterlab(tmp_path, PANEL_CELLS) as (url, token, notebook), notebook_page(url, token, shot) as page:
        page.wait_for_selector(".jp-OutputArea-output .js-plotly-plot svg.main-svg", timeout=180_000)
        readout = page.locator(".jp-OutputArea-output .widget-readout").first  # the interval slider's
        readout.wait_for(timeout=120_000)
        shot(page, "panel-drawn")
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type("1")
        page.keyboard.press("Enter")
        seen = notebook.parent / SEEN
        deadline = time.monotonic() + 240
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(1)
        assert seen.exists(), "the kernel never saw the interval change (or three commits after it)"
        said = json.loads(seen.read_text())
        assert said["interval_ms"] == 1000 and said["mark"]["kind"] == "tuned"
        assert said["mark"]["detail"] == "iceberg.control.commit.interval-ms=1000"
        commits = said["commits"]
        # Three gaps at the new pace (30 s before): the cadence followed the slider.
        assert len(commits) == 4 and max(b - a for a, b in zip(commits, commits[1:], strict=False)) < 10
        page.locator(".jp-OutputArea-output .js-plotly-plot .annotation-text", has_text="tuned").first \
            .wait_for(state="attached", timeout=60_000)
        assert not page.locator(".js-plotly-plot .annotation-text", has_text="new text").count()  # one label
        shot(page, "cadence-followed")
    print("\nscreenshots:", *map(str, shots), sep="\n  ")
