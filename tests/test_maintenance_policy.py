"""Pure logic of maintenance: the policy keys, and what expiry keeps for recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_cli

from sinklab.exceptions import ConfigError
from sinklab.maintenance import schedule
from sinklab.maintenance.policy import parse_duration, parse_policy
from sinklab.maintenance.retention import Ref, Snap, expiry_cutoff, recovery_snapshots, stale_stages, unreachable
from sinklab.sink import IcebergSink
from sinklab.sink.config.sink_config import load_config
from sinklab.sink.tables.write import stage_name


def config(**keys: str) -> dict[str, str]:
    return {"name": "s", "topics": "t", "iceberg.tables": "db.t", **keys}


def test_durations() -> None:
    assert [parse_duration("k", v) for v in ("250", "250ms", "30s", "10m", "2h", "7d")] == [
        250, 250, 30_000, 600_000, 7_200_000, 604_800_000]
    with pytest.raises(ValueError, match="k: expected a duration"):
        parse_duration("k", "1 week")


def test_policy_from_the_sink_config() -> None:
    hook = schedule(load_config(config(**{"sinklab.maintenance.compact.every-commits": "10",
                                          "sinklab.maintenance.expire.older-than": "1h",
                                          "sinklab.maintenance.orphans.older-than": "2h"})))
    assert hook is not None
    policy = hook.policy
    assert (policy.compact_every_commits, policy.expire_older_than_ms, policy.orphans_older_than_ms) == (
        10, 3_600_000, 7_200_000)
    assert policy.enabled and not parse_policy({}).enabled
    assert schedule(load_config(config())) is None


def test_a_sink_given_maintenance_keys_and_no_hook_says_how_to_run_them() -> None:
    keys = config(**{"sinklab.maintenance.compact.every-commits": "10"})
    with pytest.raises(ConfigError, match=r"sinklab.maintenance.compact.every-commits: table maintenance runs "
                                          r"between cycles .* between_cycles=sinklab.maintenance.schedule\(config\)"):
        IcebergSink(None, keys)  # type: ignore[arg-type] - refused before the stack is used


@pytest.mark.parametrize(("keys", "message"), [
    ({"sinklab.maintenance.compact.every": "3"}, "sinklab.maintenance.compact.every: unknown maintenance key"),
    ({"sinklab.maintenance.compact.small-files": "many"}, "compact.small-files: expected a non-negative integer"),
    ({"sinklab.maintenance.expire.older-than": "1h"}, "expire.older-than: say when to expire"),
    ({"sinklab.maintenance.expire.every-commits": "5"}, "expire.every-commits: set sinklab.maintenance.expire"),
    ({"sinklab.maintenance.compact.every-commits": "5", "sinklab.maintenance.orphans.older-than": "1h"},
     "orphans.older-than: orphan files are cleaned with each expiry"),
])
def test_bad_policies_name_the_key(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        schedule(load_config(config(**keys)))


def history() -> tuple[dict[int, Snap], list[Ref]]:
    """main: 1 (sink a) <- 2 (sink b) <- 3 (compaction) <- 4 (sink a) <- 5 (compaction); a dead stage 6 off 4,
    a live stage 7 off 5, and 8, staged by a cycle whose branch is gone."""
    def sink(name: str, **extra: str) -> dict[str, str]:
        return {"sinklab.sink": name, "sinklab.offsets": "{}", **extra}

    snaps = {1: Snap(1, None, 100, sink("a")), 2: Snap(2, 1, 200, sink("b")), 3: Snap(3, 2, 300),
             4: Snap(4, 3, 400, sink("a")), 5: Snap(5, 4, 500), 6: Snap(6, 4, 450, sink("a")),
             7: Snap(7, 5, 900, sink("a")), 8: Snap(8, 2, 250, sink("a"))}
    refs = [Ref("main", 5, True), Ref(stage_name("a", "dead"), 6, True), Ref(stage_name("a", "live"), 7, True)]
    return snaps, refs


def test_expiry_keeps_each_sinks_newest_commit_and_everything_after_it() -> None:
    snaps, refs = history()
    held = recovery_snapshots(snaps, refs)
    assert {k: s.snapshot_id for k, s in held.items()} == {("main", "a"): 4, ("main", "b"): 2}
    assert expiry_cutoff(1000, held) == 200  # sink b's last commit holds the line
    assert expiry_cutoff(150, held) == 150


def test_stale_stages_and_unreachable_snapshots() -> None:
    snaps, refs = history()
    assert [r.snapshot_id for r in stale_stages(snaps, refs, 600)] == [6]  # the live one is younger
    assert unreachable(snaps, refs, 600) == [8]
    gone = [r for r in refs if r.snapshot_id != 6]
    assert unreachable(snaps, gone, 600) == [6, 8]
    assert unreachable(snaps, gone, 300) == [8]  # 6 is younger than the safety age


def test_expiry_keeps_apaches_newest_commit_with_its_control_offsets() -> None:
    """Apache's coordinator walks the branch back to its newest snapshot carrying
    ``kafka.connect.offsets.<control topic>.<group>`` (which keeps it from committing a round twice):
    held as a sink's, per control topic and group; a compaction above it holds nothing."""
    apache = "kafka.connect.offsets.control-iceberg.connect-orders"
    snaps = {
        1: Snap(1, None, 100, {apache: '{"0": 5}'}),
        2: Snap(2, 1, 200, {apache: '{"0": 9}'}),
        3: Snap(3, 2, 300, {}),  # a compaction
    }
    held = recovery_snapshots(snaps, [Ref("main", 3, True)])
    assert {k: s.snapshot_id for k, s in held.items()} == {("main", "Apache's control-iceberg.connect-orders"): 2}
    assert expiry_cutoff(1000, held) == 200


def test_orphan_paths_compare_as_icebergs_action_compares_them() -> None:
    from sinklab.maintenance.operations import _same_file

    assert _same_file("file:/w/t/data/a.parquet") == _same_file("file:///w/t/data/a.parquet")
    assert _same_file("s3a://bucket/w/a.parquet") == _same_file("s3://bucket/w/a.parquet")
    assert _same_file("s3://bucket/w/a.parquet") != _same_file("s3://other/w/a.parquet")
    assert _same_file("file:/w/t/data/a.parquet") != _same_file("file:/w/t/data/b.parquet")


def test_table_follow_names_what_is_missing_before_it_starts(tmp_path: Path) -> None:
    """`sinklab table follow`'s arguments are checked before any stack or Spark: no tables, no policy,
    a bad key; a connector's config in Connect's REST shape gives both (its iceberg.tables)."""
    none = run_cli("table", "follow", "--set", "sinklab.maintenance.compact.every-commits=3")
    assert none.returncode != 0 and "name the tables" in none.stderr
    idle = run_cli("table", "follow", "db.t")
    assert idle.returncode != 0 and "sinklab.maintenance.compact.every-commits" in idle.stderr
    bad = run_cli("table", "follow", "db.t", "--set", "sinklab.maintenance.compact.every-commits=often")
    assert bad.returncode != 0 and "sinklab.maintenance.compact.every-commits" in bad.stderr
    connector = tmp_path / "c.json"
    connector.write_text(json.dumps({"name": "c", "config": {
        "iceberg.tables": "db.a,db.b", "sinklab.maintenance.compact.every-commits": "3"}}))
    ran = run_cli("table", "follow", "--config", str(connector))  # tables and policy found: then the stack
    assert ran.returncode != 0 and "--stack" in ran.stderr, ran.stderr
