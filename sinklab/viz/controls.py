"""Turn the knobs of a running pipeline and watch it follow: a control panel (ipywidgets) beside the
dashboard, for sinklab's sink (``IcebergSink.retune``, ``pause``, ``resume``, ``stop``) or Apache's
(``Observed``: the Connect REST API's config update, pause and resume, as its users change it), and for
the generator feeding it (``Production.set_rate``, ``pause``, ``resume``).

    panel = viz.ControlPanel(sink, production=run)
    panel                      # beside viz.Dashboard(sink): each change is a dashed line on its panels

Every control acts from the sink's next cycle (Apache's: once its tasks restart with the new config);
what happened is kept in ``panel.log`` and the sink's ``status().marks``, which the dashboard draws. The
kernel hears a widget only between cells: a cell that waits in a loop holds the controls back (wait in a
thread, or not at all).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sinklab.sink.config import keys

if TYPE_CHECKING:
    from sinklab.generators import Production
    from sinklab.sink import IcebergSink
    from sinklab.viz.observed import Observed

INTERVAL_RANGE_S = (0.5, 600.0)  # the interval slider's ends (log scale)
RATE_RANGE = (10.0, 100_000.0)  # the generator's, records a second


class ControlPanel:
    """The controls of one sink (``IcebergSink`` or ``Observed``) and, given, the ``production`` that feeds
    it. ``changed`` is called after each change (a test or a notebook can wait on it)."""

    def __init__(self, sink: IcebergSink | Observed, production: Production | None = None):
        import ipywidgets as widgets

        from sinklab.sink import IcebergSink

        self.sink = sink
        self.production = production
        self.log: list[dict[str, Any]] = []  # {at, what, value}, oldest first
        own = isinstance(sink, IcebergSink)  # sinklab's: a lag target, a record trigger and a stop too
        interval_s = sink.config.commit_interval_ms / 1000
        low, high = INTERVAL_RANGE_S
        self.interval = widgets.FloatLogSlider(
            value=min(max(interval_s, low), high), base=10, min=_log10(low), max=_log10(high), step=0.05,
            description="interval (s)", continuous_update=False, readout_format=".2f",
            style={"description_width": "initial"}, layout=widgets.Layout(width="480px"))
        self.interval.observe(lambda change: self.set_interval(change["new"]), names="value")
        knobs: list[Any] = []
        if own:
            target = sink.config.commit_target_lag_ms
            self.target = widgets.FloatText(value=(target or 0) / 1000, description="lag target (s, 0: off)",
                                            style={"description_width": "initial"})
            self.target.observe(lambda change: self.set_target(change["new"]), names="value")
            records = sink.config.commit_max_records
            self.max_records = widgets.IntText(value=records or 0, description="commit at records (0: off)",
                                               style={"description_width": "initial"})
            self.max_records.observe(lambda change: self.set_max_records(change["new"]), names="value")
            knobs += [self.target, self.max_records]
        self.paused = widgets.ToggleButton(value=False, description="pause sink", icon="pause")
        self.paused.observe(lambda change: self.pause_sink(change["new"]), names="value")
        buttons: list[Any] = [self.paused]
        if own:
            self.stop_button = widgets.Button(description="stop sink", button_style="danger", icon="stop")
            self.stop_button.on_click(lambda _: self.stop_sink())
            buttons.append(self.stop_button)
        rows = [widgets.HBox([self.interval, *buttons]), *([widgets.HBox(knobs)] if knobs else [])]
        if production is not None:
            rate = production.rate or 1000.0
            self.rate = widgets.FloatLogSlider(
                value=rate, base=10, min=_log10(RATE_RANGE[0]), max=_log10(RATE_RANGE[1]), step=0.05,
                description="records/s", continuous_update=False, readout_format=",.0f",
                style={"description_width": "initial"}, layout=widgets.Layout(width="480px"))
            self.rate.observe(lambda change: self.set_rate(change["new"]), names="value")
            self.produce_paused = widgets.ToggleButton(value=False, description="pause stream", icon="pause")
            self.produce_paused.observe(lambda change: self.pause_stream(change["new"]), names="value")
            rows.append(widgets.HBox([self.rate, self.produce_paused]))
        self.said = widgets.HTML(value=f"<b>{sink.config.name}</b>: interval {interval_s:g} s")
        self.box = widgets.VBox([*rows, self.said])
        self.changed: list[Any] = []  # callables, each called with the log's newest entry

    # ---- what each control does (callable without the widgets, from code or a test)
    def set_interval(self, seconds: float) -> None:
        ms = max(1, round(seconds * 1000))
        self.sink.retune(commit_interval_ms=ms)
        self._say("interval", ms, f"interval {ms / 1000:g} s")

    def set_target(self, seconds: float) -> None:
        ms = round(seconds * 1000) or None
        self.sink.retune(commit_target_lag_ms=ms)  # type: ignore[call-arg]
        self._say(keys.COMMIT_TARGET_LAG_MS, ms, f"lag target {'off' if ms is None else f'{ms / 1000:g} s'}")

    def set_max_records(self, records: int) -> None:
        self.sink.retune(commit_max_records=records or None)  # type: ignore[call-arg]
        self._say(keys.COMMIT_MAX_RECORDS, records or None, f"commit at {records or 'no'} records")

    def pause_sink(self, paused: bool) -> None:
        (self.sink.pause if paused else self.sink.resume)()
        self._say("sink", "paused" if paused else "running", "sink paused" if paused else "sink resumed")

    def stop_sink(self) -> None:
        self.sink.stop()  # type: ignore[union-attr]
        self._say("sink", "stopped", "sink stopped")

    def set_rate(self, per_second: float) -> None:
        assert self.production is not None
        self.production.set_rate(per_second)
        self._say("rate", per_second, f"stream at {per_second:,.0f} records/s")

    def pause_stream(self, paused: bool) -> None:
        assert self.production is not None
        (self.production.pause if paused else self.production.resume)()
        self._say("stream", "paused" if paused else "running", "stream paused" if paused else "stream resumed")

    def _say(self, what: str, value: Any, text: str) -> None:
        entry = {"at": time.time(), "what": what, "value": value}
        self.log.append(entry)
        self.said.value = f"<b>{self.sink.config.name}</b>: {text} ({time.strftime('%H:%M:%S')})"
        for call in self.changed:
            call(entry)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def _log10(x: float) -> float:
    import math

    return math.log10(x)
