"""`sinklab explore`: the commit-interval explorer from a terminal (``viz.explore_intervals``), for sinklab's
sink or Apache's own: a table on stdout, the runs as JSON with ``--json``."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from sinklab.commands.common import stack_for
from sinklab.exceptions import CliError, PolicyError

# What each run reports, in the JSON's names (``--json``), from the explorer's results.
RUN_FIELDS = ("sink", "interval_ms", "records", "snapshots", "p50_visibility_s", "p99_visibility_s",
              "snapshots_per_hour", "data_files_per_hour", "mean_file_bytes", "commit_round_s", "table", "note")


def cmd_explore(args: argparse.Namespace) -> int:
    from sinklab.generators import Generator, SpecError, TrafficProfile, load_spec
    from sinklab.maintenance import parse_duration
    from sinklab.stack import Stack
    from sinklab.viz import explore_intervals
    from sinklab.viz.explorer import SINKS

    sinks = [s.strip() for s in args.sink.split(",") if s.strip()]
    if not sinks or any(s not in SINKS for s in sinks):
        raise CliError(f"--sink: one of {', '.join(SINKS)} (or both, comma-separated), not {args.sink!r}")
    try:
        intervals = [parse_duration("--intervals", i) for i in args.intervals.split(",") if i.strip()]
    except PolicyError as exc:
        raise CliError(str(exc)) from None
    if not intervals or min(intervals) <= 0:
        raise CliError(f"--intervals: positive durations such as 2s,10s,60s, not {args.intervals!r}")
    if args.rate <= 0 or args.seconds <= 0:
        raise CliError("--rate and --seconds: more than zero")
    try:
        generator = Generator(load_spec(args.generator), seed=args.seed)
        traffic = TrafficProfile.load(args.traffic) if args.traffic else None
    except SpecError as exc:
        raise CliError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise CliError(f"--traffic {args.traffic}: {exc}") from None
    # A profile's stream: as many records as its curve sends in --seconds.
    count = math.ceil(traffic.schedule(args.speed).allowed(args.seconds) if traffic else args.rate * args.seconds)
    with contextlib.ExitStack() as scope:
        if args.stack:
            stack = stack_for(args)
        else:  # an embedded stack for the runs alone, stopped with them
            workdir = Path(scope.enter_context(tempfile.TemporaryDirectory(prefix="sinklab-explore-")))
            stack = scope.enter_context(Stack.embedded(workdir / "stack"))
        exploration = explore_intervals(
            stack, generator, intervals, count=count, rate=args.rate,
            partitions=args.partitions, config=args.config, sink=sinks, traffic=traffic, speed=args.speed,
            catch_up_s=max(120.0, 3 * max(intervals) / 1000))
    runs = [run_of(row) for row in exploration.results.to_dict("records")]
    print(table_text(runs))
    if args.json:
        Path(args.json).write_text(json.dumps({"sink": ",".join(sinks), "runs": runs}, indent=2) + "\n")
    return 0


def run_of(row: dict[str, Any]) -> dict[str, Any]:
    """One run of the explorer's results in ``RUN_FIELDS``; a figure not measured is null."""
    def number(value: Any, digits: int = 3) -> float | None:
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value),
                                                                                                   digits)
    file_kib = number(row["mean_file_kib"])
    cycle_ms = number(row["mean_cycle_ms"])
    return {"sink": row["sink"], "interval_ms": int(row["interval_ms"]), "records": int(row["records"]),
            "snapshots": int(row["snapshots"]), "p50_visibility_s": number(row["p50_s"]),
            "p99_visibility_s": number(row["p99_s"]),
            "snapshots_per_hour": number(row["snapshots_per_hour"], 1),
            "data_files_per_hour": number(row["files_per_table_per_hour"], 1),
            "mean_file_bytes": None if file_kib is None else int(file_kib * 1024),
            "commit_round_s": None if cycle_ms is None else round(cycle_ms / 1000, 3),
            "table": row["table"], "note": row["note"] or None}


def table_text(runs: list[dict[str, Any]]) -> str:
    heads = ["sink", "interval", "records", "snapshots", "p50 s", "p99 s", "snapshots/h", "files/h", "mean file",
             "round s", "table", "note"]

    def cell(value: Any) -> str:
        return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
    rows = [[r["sink"], f"{r['interval_ms'] / 1000:g} s", *[cell(r[k]) for k in (
        "records", "snapshots", "p50_visibility_s", "p99_visibility_s", "snapshots_per_hour", "data_files_per_hour",
        "mean_file_bytes", "commit_round_s", "table")], r["note"] or ""] for r in runs]
    widths = [max(len(str(x)) for x in column) for column in zip(heads, *rows, strict=True)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
                     for line in [heads, *rows])
