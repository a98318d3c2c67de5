"""A live dashboard of a running sink: one plotly figure of six panels that refreshes from Iceberg and Kafka.

The sink runs in a background thread of the kernel (``sink.start()``); the dashboard reads what
any observer can read — the tables' metadata, the control topic, the group's offsets — so it
shows what readers see, not the sink's private state.

Live, it is plotly's JSON in an ipywidgets ``Output`` that JupyterLab's plotly extension redraws at
every refresh — not a ``FigureWidget``, which saves a copy of plotly.js (5 MB) per figure in the
notebook's widget state. Stopped, ``figure()`` is the final state as an ordinary output, with a PNG
for exports and viewers without JavaScript.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import threading
import time
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go

from sinklab import fresh as fresh_reads
from sinklab import readings
from sinklab.viz import figures, render

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from sinklab.sink import IcebergSink, RemoteSink
    from sinklab.viz.observed import Observed

PANELS = ("snapshots", "cadence", "freshness", "lag", "files", "fan_out")
TIME_CELLS = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)]  # the grid's panels over time (all but fan-out's)
PANEL_HEIGHT = 330


class Dashboard:
    """Status and six panels of one sink: snapshot history, commit cadence, freshness, consumer lag,
    files per commit and fan-out; one colour per table in every panel. The sink is one of this process's,
    a remote one, or a connector another program runs (``Observed``: Apache's sink in a Connect worker).

    ``refresh()`` reads everything once and redraws (no browser needed: the data is in ``frames``,
    the panels in ``figures``, the figure shown in ``live``); ``start()`` refreshes every ``every_s``
    seconds in a background thread until ``stop()``, which refreshes once more so the figure left
    in the notebook is the final state; ``run(seconds)`` refreshes in the foreground. ``figure()``
    is that figure, as a ``go.Figure``. With ``fresh`` the snapshot panel also draws, per table, the count
    of a fresh read at each refresh (``sinklab.fresh``, for a sinklab sink): it follows the stream while
    the table steps at each commit.
    """

    def __init__(self, sink: IcebergSink | RemoteSink | Observed, tables: Iterable[str] | None = None,
                 every_s: float = 2.0, lag_samples: int = 500, fresh: bool = False):
        self.sink = sink
        # Each refresh also counts a fresh read of each table (sinklab.fresh: a Spark job per table), drawn
        # beside the committed rows: the table steps at each commit, the fresh count follows the stream.
        self.fresh = fresh
        self._fresh: list[dict[str, Any]] = []
        self._readers: dict[str, fresh_reads.Reader] = {}  # one per table: each read converts only what is new
        self.stack = sink.stack
        self.config = sink.config
        self.every_s = every_s
        self.tables = list(tables) if tables is not None else None
        self.lag_samples = lag_samples
        self.frames: dict[str, pd.DataFrame] = {}
        self.figures: dict[str, go.Figure] = {}
        self.live: go.Figure | None = None  # the figure the notebook shows now
        self.refreshes = 0
        self.error: str | None = None
        self.header = self._header_html(None)
        self._catalog: Catalog | None = None
        self._log: readings.ControlLog | None = None
        self._version: tuple[Any, ...] = ()
        self._lag: list[pd.DataFrame] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False
        self._out: Any = None  # the live view (an ipywidgets Output), once displayed

    # ---- reading
    @property
    def catalog(self) -> Catalog:
        # Its own client: the sink's background thread uses the stack's.
        if self._catalog is None:
            from sinklab.stack.catalog_client import rest_catalog

            self._catalog = rest_catalog(self.stack.info.catalog_name, self.stack.catalog_properties())
        return self._catalog

    def _topics(self) -> list[str]:
        if self.config.topics:
            return list(self.config.topics)
        return sorted(t for t in self.stack.admin().list_topics(timeout=10).topics if self.config.reads_topic(t))

    def refresh(self) -> dict[str, pd.DataFrame]:
        """Read the tables, the control topic and the lag once; update every figure; return the frames."""
        with self._lock:
            config = self.config
            if self._log is None:
                self._log = readings.ControlLog(self.stack, sink=config.name, control_topic=config.control_topic)
            log = self._log.read(idle_s=0.2)
            commit_frame = readings.commits(self.stack, log=log)
            cycle_frame = readings.cycles(self.stack, log=log)
            tables = self.tables if self.tables is not None else sorted(
                {*config.tables, *commit_frame["table"]})
            parts = [readings.snapshots(self.catalog, t, branch=config.table_branch(t)) for t in tables
                     if self.catalog.table_exists(t)]
            snaps = pd.concat(parts, ignore_index=True) if parts else readings.snapshots(self.catalog, [])
            self._lag.append(readings.consumer_lag(self.stack, config.group_id, self._topics()))
            self._lag = self._lag[-self.lag_samples:]
            lag = pd.concat(self._lag, ignore_index=True)
            now = pd.Timestamp.now(tz="UTC")
            if self.fresh:
                for t in sorted(set(snaps["table"])):
                    if t not in self._readers:
                        self._readers[t] = fresh_reads.Reader(self.stack, t, config)
                    rows = self._readers[t].read().df.count()
                    self._fresh.append({"at": pd.Timestamp.now(tz="UTC"), "table": t, "rows": rows})
            fresh_frame = pd.DataFrame(self._fresh, columns=["at", "table", "rows"]) if self.fresh else None
            interval = config.commit_interval_ms
            self.frames = {
                "snapshots": snaps, "commits": commit_frame, "cycles": cycle_frame, "lag": lag,
                **({"fresh": fresh_frame} if fresh_frame is not None else {}),
                "cadence": readings.cadence(snaps, interval, sink=config.name),
                "freshness": readings.freshness(snaps, now, sink=config.name),
                "maintenance": readings.maintenance_runs(self.stack, log=log),
            }
            # Building plotly figures costs CPU the sink's driver shares: only what changed is redrawn.
            version = (len(log), tuple(snaps["snapshot_id"]))
            redraw = ({"freshness", "lag", *(["snapshots"] if self.fresh else [])}
                      if version == self._version and self.figures else set(PANELS))
            self._version = version
            make = {
                "snapshots": lambda: figures.plot_snapshots(snaps, fresh=fresh_frame),
                "cadence": lambda: figures.plot_cadence(self.frames["cadence"], interval, cycle_frame=cycle_frame),
                "freshness": lambda: figures.plot_freshness(self.frames["freshness"]),
                "lag": lambda: figures.plot_lag(lag),
                "files": lambda: figures.plot_files(snaps),
                "fan_out": lambda: figures.plot_fan_out(commit_frame),
            }
            for name in PANELS:
                if name in redraw:
                    self.figures[name] = make[name]()
            self.refreshes += 1
            self.error = None
            self.header = self._header_html(lag)
            self.live = figures.combine([self.figures[name] for name in PANELS], title=self._title(lag),
                                        height_per_row=PANEL_HEIGHT)
            status = self.sink.status()
            figures.mark_faults(self.live, status.faults, TIME_CELLS)
            figures.mark_moments(self.live, status.marks, TIME_CELLS)
        self._show()
        return self.frames

    def _status_parts(self, lag: pd.DataFrame | None) -> tuple[Any, list[str]]:
        status = self.sink.status()
        last = status.last_commit
        behind = 0 if lag is None or lag.empty else int(lag[lag["at"] == lag["at"].max()]["lag"].sum())
        interval_ms = status.pace["interval_ms"] if status.pace else self.config.commit_interval_ms
        clock = (f"target lag {status.pace['target_ms'] / 1000:g} s, interval {interval_ms / 1000:.2f} s"
                 if status.pace else f"commit interval {interval_ms / 1000:g} s")
        parts = [f"{status.cycles} cycles, {status.records:,} records", clock, f"lag {behind:,}"]
        if status.retrying:
            r = status.retrying
            parts.insert(0, f"retrying: {r['attempt']} cycles failed in {time.time() - r['since']:.0f} s "
                            f"({r['error']}), next in {r['next_in_s']:.0f} s")
        elif status.counters.get("retries"):
            parts.append(f"{status.counters['retries']} cycles retried, recovered")
        if last:
            ago = time.time() - last["at"]
            parts.append(f"last commit {ago:.1f} s ago ({last['records']:,} records in {last['duration_ms']} ms)")
        paced = readings.pace(self.frames["cycles"], interval_ms) if self.frames else None
        if status.pace:
            parts.append(status.pace["note"])  # says so plainly when the target is below what cycles achieve
        elif paced:
            parts.append(f"cycles take {paced['cycle_s']:.2f} s (median of the last {paced['cycles']}): "
                         + ("the interval sets the pace" if paced["binds"] == "interval" else
                            "longer than the interval, so each starts as the last ends"))
        stages = readings.dead_letter_stages(self.frames["cycles"]) if self.frames else {}
        if stages:
            parts.append(f"{sum(stages.values()):,} dead letters (" + ", ".join(
                f"{stage} {n:,}" for stage, n in stages.items()) + ")")
        runs = self.frames.get("maintenance") if self.frames else None
        if runs is not None and not runs.empty:
            latest = runs.iloc[-1]
            parts.append(f"{runs['ts'].nunique()} maintenance runs, the last {latest['duration_ms'] / 1000:.1f} s "
                         f"({latest['rewritten_data_files']} files compacted, {latest['expired_snapshots']} snapshots "
                         f"expired, next cycle {latest['delay_ms'] / 1000:.1f} s late)")
        return status, parts

    def _title(self, lag: pd.DataFrame | None) -> str:
        status, parts = self._status_parts(lag)
        now = pd.Timestamp.now(tz="UTC").strftime("%H:%M:%S")
        return (f"<b>{html.escape(status.name)}: {status.state}</b> · " + " · ".join(parts[:3]) + f" · as of {now} UTC"
                + ("<br><span style='font-size:12px'>" + " · ".join(parts[3:]) + "</span>" if parts[3:] else ""))

    def _header_html(self, lag: pd.DataFrame | None) -> str:
        status, parts = self._status_parts(lag)
        color = {"RUNNING": "#2e7d32", "FAILED": "#c62828"}.get(status.state, "#555")
        text = f'<b style="color:{color}">{html.escape(status.name)}: {status.state}</b> · ' + " · ".join(parts)
        if self.error or status.trace:
            trace = (self.error or status.trace or "").strip().splitlines()[-1]
            text += f'<br><span style="color:#c62828">{html.escape(trace)}</span>'
        return f'<div style="font-family:monospace">{text}</div>'

    # ---- running
    def start(self) -> Dashboard:
        """Refresh every ``every_s`` seconds in a background thread (errors show in the header)."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    self.refresh()
                except Exception:  # noqa: BLE001 - a dashboard shows its errors and keeps trying
                    self.error = traceback.format_exc()
                    with contextlib.suppress(Exception):
                        self.header = self._header_html(None)
                        self._show()
                self._stop.wait(max(0.0, self.every_s - (time.monotonic() - began)))

        self._thread = threading.Thread(target=loop, name=f"sinklab-dashboard-{self.config.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30) -> Dashboard:
        """Stop refreshing, refresh once more (the live view and ``figure()`` show the final state) and
        close the Kafka consumer and the fresh readers (a later refresh opens new ones)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        try:
            self.refresh()
        finally:
            with self._lock:
                if self._log is not None:
                    self._log.close()
                    self._log = None
                for reader in self._readers.values():  # their cached tails are freed
                    reader.close()
                self._readers = {}
        return self

    def run(self, seconds: float) -> Dashboard:
        """Refresh in the foreground for ``seconds`` (the cell runs that long; the sink keeps running)."""
        deadline = time.monotonic() + seconds
        while True:
            began = time.monotonic()
            self.refresh()
            if began + self.every_s >= deadline:
                return self
            time.sleep(max(0.0, self.every_s - (time.monotonic() - began)))

    # ---- showing
    def figure(self) -> go.Figure:
        """Every panel as one figure, as last refreshed (refreshes first if nothing was read yet)."""
        if self.live is None:
            self.refresh()
        assert self.live is not None
        return self.live

    def _ipython_display_(self) -> None:
        """The live view: an ipywidgets ``Output`` that the background thread updates through its comm,
        whichever cell runs meanwhile. Widgets need a running kernel; for exports, GitHub and saved
        notebooks, show ``figure()`` after ``stop()`` (a plain output, with a PNG)."""
        import ipywidgets as widgets
        from IPython.display import display

        if self.live is None:
            self.refresh()
        self._out = widgets.Output(layout={"min_height": f"{PANEL_HEIGHT * 3 + 110}px"})
        display({"application/vnd.jupyter.widget-view+json": {
                    "model_id": self._out.model_id, "version_major": 2, "version_minor": 0},
                 "text/plain": f"live dashboard of sink {self.config.name} (it moves in JupyterLab while the kernel "
                               "runs; dashboard.figure() after dashboard.stop() shows its final state anywhere)"},
                raw=True)
        self._shown = True
        self._show()

    def _show(self) -> None:
        if not self._shown or self.live is None:
            return
        data = {render.PLOTLY_MIME: json.loads(self.live.to_json()), "text/plain": "sinklab dashboard"}
        self._out.outputs = ({"output_type": "display_data", "data": data, "metadata": {}},)

    def __repr__(self) -> str:
        return re.sub(r"<[^>]+>", "", self.header)
