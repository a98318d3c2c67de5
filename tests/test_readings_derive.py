"""Unit tests of sinklab.readings' pure derivations on small hand-made frames (no stack, no Spark): the
cadence of commits, the tables' freshness, each record's visibility, and the dead letters by stage."""

from __future__ import annotations

import math

import pandas as pd

from sinklab import readings


def at(*seconds: float) -> list[pd.Timestamp]:
    return [pd.Timestamp(s * 1000, unit="ms", tz="UTC") for s in seconds]


def snaps(rows: list[tuple[str, str | None, int, float, dict | None, float | None]]) -> pd.DataFrame:
    """Snapshots as ``readings.snapshots`` gives them, from (table, sink, snapshot_id, visible_at s,
    offsets, vtts s) in commit order."""
    frame = pd.DataFrame(rows, columns=["table", "sink", "snapshot_id", "visible_at", "offsets", "vtts"])
    frame["visible_at"] = at(*frame["visible_at"])
    frame["vtts"] = pd.to_datetime([pd.NaT if v is None else at(v)[0] for v in frame["vtts"]], utc=True)
    frame["sequence_number"] = range(1, len(frame) + 1)
    return frame


def test_cadence_is_the_gaps_between_a_sinks_commits_per_table_against_the_interval() -> None:
    frame = snaps([
        ("t", "s", 1, 10.0, {"k": {0: 5}}, 9.0),
        ("t", None, 2, 11.0, None, None),  # another writer's snapshot: not a sink commit
        ("u", "s", 3, 11.5, {"k": {0: 5}}, 9.0),
        ("t", "s", 4, 12.0, {"k": {0: 9}}, 11.0),
        ("t", "other", 5, 13.0, {"k": {0: 9}}, 12.0),  # another sink's commit
        ("t", "s", 6, 15.0, {"k": {0: 12}}, 14.0),
        ("u", "s", 7, 13.5, {"k": {0: 12}}, 12.0),
    ])
    out = readings.cadence(frame, 2000, sink="s")
    assert out["table"].tolist() == ["t", "t", "u"]
    assert out["snapshot_id"].tolist() == [4, 6, 7]
    assert out["gap_s"].tolist() == [2.0, 3.0, 2.0]
    assert out["ratio"].tolist() == [1.0, 1.5, 1.0]
    # Without a sink, every sink's commits count; without an interval there is no ratio.
    every = readings.cadence(frame)
    assert every[every["table"] == "t"]["gap_s"].tolist() == [2.0, 1.0, 2.0]
    assert every["ratio"].isna().all()


def test_freshness_is_a_sawtooth_of_staleness_after_and_before_each_commit() -> None:
    frame = snaps([
        ("t", "s", 1, 10.0, {"k": {0: 5}}, 8.0),
        ("t", "s", 2, 14.0, {"k": {0: 9}}, 13.0),
        ("t", "s", 3, 15.0, {"k": {0: 9}}, None),  # no valid-through time: left out
    ])
    out = readings.freshness(frame, now=at(20.0)[0])
    assert out["snapshot_id"].tolist() == [1, 2]
    assert out["until"].tolist() == at(14.0, 20.0)  # the next commit, then now
    assert out["fresh_s"].tolist() == [2.0, 1.0]
    assert out["stale_s"].tolist() == [6.0, 7.0]


def test_visibility_finds_each_records_first_snapshot_and_marks_the_warm_up_cycle() -> None:
    frame = snaps([
        ("t", "s", 1, 10.0, {"k": {0: 3}}, 9.0),
        ("t", "s", 2, 20.0, {"k": {0: 5, 1: 2}}, 19.0),
    ])
    records = pd.DataFrame({"topic": ["k"] * 8, "partition": [0, 0, 0, 0, 0, 0, 1, 1],
                            "offset": [0, 1, 2, 3, 4, 5, 0, 1], "produced_at": at(1, 2, 3, 4, 5, 6, 7, 8)})
    vis = readings.visibility(frame, records, sink="s")
    assert vis.columns.tolist() == readings.VISIBILITY_COLUMNS
    assert vis["snapshot_id"].tolist()[:5] == [1, 1, 1, 2, 2]
    assert pd.isna(vis["snapshot_id"].iloc[5]) and pd.isna(vis["visible_at"].iloc[5])  # offset 5: not committed
    assert vis["snapshot_id"].tolist()[6:] == [2, 2]  # partition 1 first appears in the second snapshot
    assert vis["warmup"].tolist() == [True, True, True, False, False, False, False, False]
    latency = vis["latency_s"].tolist()
    assert latency[:5] == [9.0, 8.0, 7.0, 16.0, 15.0] and math.isnan(latency[5]) and latency[6:] == [13.0, 12.0]
    # The percentiles leave the warm-up cycle out, and say how many they left.
    pct = readings.latency_percentiles(vis, quantiles=(0.5,)).iloc[0]
    assert (pct["records"], pct["p50"], pct["warmup_records"]) == (4, 14.0, 3)
    # Another sink's snapshots do not make records visible.
    assert readings.visibility(frame, records, sink="other").empty


def test_dead_letter_stages_count_bad_records_by_kafka_connects_stage() -> None:
    cycles = pd.DataFrame({"counters": [
        {"no-table": 3},  # no dead letters: unrouted records were skipped, not dead-lettered
        {"dead-lettered": 6, "undecodable": 2, "key-converter": 1, "type-mismatch": 2, "transform": 1},
        {"dead-lettered": 1, "missing-required": 1},
    ]})
    assert readings.dead_letter_stages(cycles) == {
        "KEY_CONVERTER": 1, "TASK_PUT": 3, "TRANSFORMATION": 1, "VALUE_CONVERTER": 1}
    assert readings.dead_letter_stages(cycles.iloc[:1]) == {}
