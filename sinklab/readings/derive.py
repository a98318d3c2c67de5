"""Derivations over the frames the other readings return: pure pandas, no I/O, so they run on any frame,
read now or saved, and test without a stack.

From snapshots: the ``cadence`` of commits and the tables' ``freshness``; with the records' times,
each record's ``visibility`` (any sink's: ``with_offsets`` gives Apache's snapshots their offsets) and
its ``latency_percentiles`` (``steady`` leaves the warm-up cycle out). From cycles: what sets the
``pace``, the ``flows`` from topics through the sink into tables, and the ``dead_letter_stages``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from sinklab.readings.columns import RECORD_COLUMNS, VISIBILITY_COLUMNS, empty
from sinklab.sink.records import (
    BAD_KINDS,
    DEAD_LETTER_TABLE,
    DEAD_LETTERED,
    KEY_CONNECT_STAGE,
    KEY_CONVERTER_FAILED,
    NO_TABLE,
    UNDECODABLE,
    connect_stage_of,
)


# ---- from snapshots
def _sink_snapshots(snaps: pd.DataFrame, sink: str | None) -> pd.DataFrame:
    own = snaps[snaps["sink"].notna() & snaps["offsets"].notna()]
    return own[own["sink"] == sink] if sink is not None else own


def cadence(snaps: pd.DataFrame, interval_ms: int | None = None, sink: str | None = None) -> pd.DataFrame:
    """The gaps between a table's consecutive sink commits, against the configured interval.

    ``gap_s`` is the time between two commits becoming visible; ``ratio`` is ``gap_s`` over the
    interval (1 = on time; above 1 when a cycle outlasts the interval or nothing new arrived).
    """
    own = _sink_snapshots(snaps, sink).sort_values(["table", "visible_at"])
    out = pd.DataFrame({
        "table": own["table"], "snapshot_id": own["snapshot_id"], "at": own["visible_at"],
        "gap_s": own.groupby("table")["visible_at"].diff().dt.total_seconds(),
    })
    if "series" in own.columns:  # a readable name for the table's series (the explorer's)
        out["series"] = own["series"]
    out = out.dropna(subset=["gap_s"]).reset_index(drop=True)
    out["interval_s"] = interval_ms / 1000 if interval_ms else np.nan
    out["ratio"] = out["gap_s"] / out["interval_s"]
    return out


def freshness(snaps: pd.DataFrame, now: pd.Timestamp | None = None, sink: str | None = None) -> pd.DataFrame:
    """How stale each table is over time: ``now − VTTS`` of the newest visible commit.

    For every sink commit: ``at`` (visible), ``vtts``, ``fresh_s`` (at − vtts, the staleness right
    after it) and ``stale_s`` (``until`` − vtts, the staleness just before the next commit or, for
    the newest, at ``now``). Plotted in order it is a sawtooth.
    """
    now = pd.Timestamp.now(tz="UTC") if now is None else now
    own = _sink_snapshots(snaps, sink)
    own = own[own["vtts"].notna()].sort_values(["table", "visible_at"])
    out = pd.DataFrame({"table": own["table"], "snapshot_id": own["snapshot_id"], "at": own["visible_at"],
                        "vtts": own["vtts"]})
    if "series" in own.columns:
        out["series"] = own["series"]
    out["until"] = out.groupby("table")["at"].shift(-1).fillna(now)
    out["fresh_s"] = (out["at"] - out["vtts"]).dt.total_seconds()
    out["stale_s"] = (out["until"] - out["vtts"]).dt.total_seconds()
    return out.reset_index(drop=True)


def with_offsets(snaps: pd.DataFrame, offsets: pd.DataFrame) -> pd.DataFrame:
    """``snaps`` whose snapshots record no source offsets given those of ``offsets`` (columns ``table``,
    ``snapshot_id``, ``offsets``), so that :func:`visibility` reads any sink's tables. Apache's sink keeps
    them out of the table: its control topic has them (:func:`~sinklab.readings.commits`: each commit's
    data-complete events), and where that topic is gone, the rows do (:func:`~sinklab.readings.added_offsets`,
    from a Kafka-metadata column). Offsets a snapshot records itself (sinklab's) stand."""
    known = {(t, int(s)): o for t, s, o in zip(offsets["table"], offsets["snapshot_id"], offsets["offsets"],
                                              strict=True) if o}
    out = snaps.copy()
    out["offsets"] = [o if o else known.get((t, int(s)), o)
                      for t, s, o in zip(out["table"], out["snapshot_id"], out["offsets"], strict=True)]
    return out


def visibility(snaps: pd.DataFrame, records: pd.DataFrame, sink: str | None = None) -> pd.DataFrame:
    """When each record became readable, and how long after it was produced.

    A record at offset ``o`` of partition ``p`` is in the first sink snapshot whose recorded
    ``sinklab.offsets`` for ``p`` is above ``o`` (offsets never go back along a lineage, so this is
    a binary search per partition, not a scan); it became visible at that snapshot's
    ``visible_at``. ``latency_s`` = visible_at − produced_at. Records not committed yet get NaT/NaN.

    ``warmup`` marks the records of the sink's first snapshot of each table in ``snaps``: that cycle
    carries the backlog produced before the sink started and Spark's warm-up, not the steady
    latency; :func:`latency_percentiles` and the figures keep them apart.

    With a ``table`` column in ``records`` (:func:`table_record_times`) each record is matched
    against its own table only; without it (:func:`record_times`) against every table in ``snaps``,
    which is right when every table takes every record (no routing).
    """
    own = _sink_snapshots(snaps, sink)
    out = []
    for table, tsnaps in own.groupby("table", sort=True):
        tsnaps = tsnaps.sort_values("sequence_number")
        recs = records[records["table"] == table] if "table" in records.columns else records
        for (topic, partition), group in recs.groupby(["topic", "partition"], sort=False):
            marks = np.maximum.accumulate(np.asarray(
                [o.get(topic, {}).get(int(partition), 0) for o in tsnaps["offsets"]], dtype=np.int64))
            idx = np.searchsorted(marks, group["offset"].to_numpy(), side="right")
            found = idx < len(marks)
            safe = np.where(found, idx, 0)
            visible = tsnaps["visible_at"].to_numpy()[safe]
            ids = tsnaps["snapshot_id"].to_numpy()[safe]
            chunk = group[RECORD_COLUMNS].copy()
            chunk["table"] = table
            chunk["snapshot_id"] = pd.array(np.where(found, ids, 0), dtype="Int64")
            chunk.loc[~found, "snapshot_id"] = pd.NA
            chunk["visible_at"] = pd.to_datetime(visible, utc=True)
            chunk.loc[~found, "visible_at"] = pd.NaT
            chunk["warmup"] = found & (safe == 0)
            out.append(chunk)
    if not out:
        return empty(VISIBILITY_COLUMNS)
    frame = pd.concat(out, ignore_index=True)
    frame["latency_s"] = (frame["visible_at"] - frame["produced_at"]).dt.total_seconds()
    return frame[VISIBILITY_COLUMNS]


def steady(vis: pd.DataFrame) -> pd.DataFrame:
    """The committed records outside the warm-up cycle (see :func:`visibility`)."""
    done = vis.dropna(subset=["latency_s"])
    return done[~done["warmup"].astype(bool)] if "warmup" in done.columns else done


def latency_percentiles(vis: pd.DataFrame, quantiles: Iterable[float] = (0.5, 0.9, 0.99),
                        warmup: bool = False) -> pd.DataFrame:
    """Per table: committed records and their visibility latency quantiles (``p50``, ``p99``, …) in
    seconds — without the warm-up cycle's records unless ``warmup`` (``warmup_records`` counts them)."""
    qs = list(quantiles)
    rows = []
    done = vis.dropna(subset=["latency_s"])
    kept = done if warmup else steady(vis)
    skipped = (done.groupby("table")["latency_s"].size() - kept.groupby("table")["latency_s"].size()) \
        .fillna(0).astype(int) if not done.empty else pd.Series(dtype="int64")
    for table, group in kept.groupby("table"):
        row: dict[str, Any] = {"table": table, "records": len(group)}
        row.update({f"p{round(q * 100):g}": group["latency_s"].quantile(q) for q in qs})
        row["max"] = group["latency_s"].max()
        row["warmup_records"] = int(skipped.get(table, 0))
        rows.append(row)
    return pd.DataFrame(rows, columns=["table", "records", *[f"p{round(q * 100):g}" for q in qs], "max",
                                       "warmup_records"])


# ---- from cycles
def pace(cycle_frame: pd.DataFrame, interval_ms: int, last: int = 10) -> dict[str, Any] | None:
    """What sets the pace of the recent commits: the ``interval`` (cycles end within it, the sink
    waits out the rest) or the ``cycle`` (a cycle outlasts the interval, and the next one starts at
    once with what arrived meanwhile). None before the first cycle."""
    recent = cycle_frame.tail(last)
    if recent.empty:
        return None
    cycle_s = float(recent["duration_ms"].median()) / 1000
    interval_s = interval_ms / 1000
    return {"cycle_s": cycle_s, "interval_s": interval_s, "cycles": len(recent),
            "binds": "cycle" if cycle_s >= interval_s else "interval"}


def flows(cycle_frame: pd.DataFrame, commit_frame: pd.DataFrame) -> pd.DataFrame:
    """Records from each topic into the sink, and from the sink into each table (the dead-letter table
    too), to the dead-letter topic (those no dead-letter table took), or skipped: ``source, target,
    records``, for a sankey.

    Records read per topic are the growth of the cycles' end offsets (the first cycle counted from
    offset 0, as a sink that starts at the beginning of its topics does); with one topic, the
    cycles' own read counts.
    """
    rows: list[dict[str, Any]] = []
    for sink, own in cycle_frame.groupby("sink", sort=False):
        topics = sorted({t for offsets in own["offsets"] for t in offsets})
        if len(topics) == 1:
            rows.append({"source": topics[0], "target": sink, "records": int(own["read"].sum())})
        else:
            last: dict[tuple[str, int], int] = {}
            read: dict[str, int] = {}
            for offsets in own["offsets"]:
                for topic, parts in offsets.items():
                    for p, end in parts.items():
                        read[topic] = read.get(topic, 0) + max(0, end - last.get((topic, p), 0))
                        last[(topic, p)] = max(end, last.get((topic, p), 0))
            rows.extend({"source": t, "target": sink, "records": n} for t, n in sorted(read.items()))
        mine = commit_frame[commit_frame["sink"] == sink]
        for table, n in mine.groupby("table", sort=True)["records"].sum().items():
            rows.append({"source": sink, "target": table, "records": int(n)})
        counters: dict[str, int] = {}
        for c in own["counters"]:
            for key, value in c.items():
                counters[key] = counters.get(key, 0) + int(value)
        if counters.get(DEAD_LETTERED):
            untabled = counters[DEAD_LETTERED] - counters.get(DEAD_LETTER_TABLE, 0)
            if untabled > 0:
                rows.append({"source": sink, "target": "dead letters", "records": untabled})
        elif counters.get(NO_TABLE):
            rows.append({"source": sink, "target": "no table (skipped)", "records": counters[NO_TABLE]})
        if counters.get("tombstones"):
            rows.append({"source": sink, "target": "tombstones (skipped)", "records": counters["tombstones"]})
    return pd.DataFrame(rows, columns=["source", "target", "records"])


def dead_letter_stages(cycle_frame: pd.DataFrame) -> dict[str, int]:
    """Dead letters of the cycles by Kafka Connect stage, from each cycle's counters of bad-record kinds;
    a converter's kinds are the value's but for those its key's converter failed (``KEY_CONVERTER_FAILED``)."""
    out: dict[str, int] = {}
    for counters in cycle_frame.get("counters", []):
        if not counters.get(DEAD_LETTERED):
            continue  # without dead letters, records no table takes were skipped, not dead-lettered
        keyed = int(counters.get(KEY_CONVERTER_FAILED, 0))
        for kind in BAD_KINDS:
            if counters.get(kind):
                stage = connect_stage_of(kind)
                out[stage] = out.get(stage, 0) + int(counters[kind])
        if keyed:
            out[connect_stage_of(UNDECODABLE)] -= keyed  # a key fails to decode, nothing else
            out[KEY_CONNECT_STAGE] = out.get(KEY_CONNECT_STAGE, 0) + keyed
    return dict(sorted((stage, n) for stage, n in out.items() if n))
