"""See the sink: plotly figures over the frames of ``sinklab.readings`` (Iceberg metadata, the control
topic, Kafka's timestamps; re-exported here), a live dashboard and the commit-interval explorer.

    from sinklab import viz
    snaps = viz.snapshots(stack, "rpc.pizzas")               # one row per snapshot, sinklab.* properties parsed
    viz.plot_snapshots(snaps)                                # rows over time, one marker per commit
    vis = viz.visibility(snaps, viz.record_times(stack, "completed-pizzas"))
    viz.plot_visibility(vis)                                 # produce time -> readable, per record
    viz.Dashboard(sink).start()                              # live, while sink.start() runs in the kernel
    viz.ControlPanel(sink, production=run)                   # its interval, lag target, pause, the stream's rate
    viz.Dashboard(viz.Observed(stack, "pizzas-on-ice.json", connect_url=worker)).start()  # Apache's sink, watched
    viz.explore_intervals(stack, PizzaGenerator(), [1000, 4000]).figure()
    viz.explore_intervals(stack, PizzaGenerator(), [1000, 4000], sink=["sinklab", "apache"])  # Apache's too
    plan = viz.frontier(viz.calibrate(stack), rate=400)      # the commit planner: latency vs files/day
"""

from sinklab.readings import (
    ControlLog,
    added_offsets,
    cadence,
    commits,
    consumer_lag,
    control_log,
    cycles,
    dead_letter_stages,
    dead_letters,
    files,
    flows,
    freshness,
    history,
    lag_history,
    latency_percentiles,
    load_table,
    maintenance_runs,
    metadata_history,
    pace,
    record_times,
    refs,
    schemas,
    snapshots,
    steady,
    table_record_times,
    visibility,
    with_offsets,
)
from sinklab.viz import render
from sinklab.viz.controls import ControlPanel
from sinklab.viz.dashboard import Dashboard
from sinklab.viz.explorer import Exploration, explore_intervals, wait_caught_up
from sinklab.viz.figures import (
    combine,
    plot_cadence,
    plot_counters,
    plot_fan_out,
    plot_file_layout,
    plot_files,
    plot_freshness,
    plot_lag,
    plot_metadata,
    plot_sankey,
    plot_schemas,
    plot_snapshots,
    plot_table_growth,
    plot_tradeoff,
    plot_visibility,
)
from sinklab.viz.observed import Observed
from sinklab.viz.planner import Calibration, calibrate, frontier, plot_plan, recommend

# Every figure shown in a notebook carries a PNG beside plotly's JSON (sinklab/viz/render.py).
render.use()

__all__ = [
    "Calibration", "ControlLog", "ControlPanel", "Dashboard", "Exploration", "Observed", "added_offsets", "cadence",
    "calibrate", "combine", "commits", "consumer_lag", "control_log", "cycles", "dead_letter_stages", "dead_letters",
    "explore_intervals", "files", "flows", "freshness", "frontier", "history", "lag_history", "latency_percentiles",
    "load_table", "maintenance_runs", "metadata_history", "pace", "plot_cadence", "plot_counters", "plot_fan_out",
    "plot_file_layout", "plot_files", "plot_freshness", "plot_lag", "plot_metadata", "plot_plan", "plot_sankey",
    "plot_schemas", "plot_snapshots", "plot_table_growth", "plot_tradeoff", "plot_visibility", "recommend",
    "record_times", "refs", "schemas", "snapshots", "steady", "table_record_times", "visibility", "wait_caught_up",
    "with_offsets"
]
