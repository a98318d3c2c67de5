"""sinklab's maintenance beside Apache's own sink (1.12, in the stack's Connect worker) committing throughout:
cleaning keeps the files it wrote and has not committed yet (named in its data-written events, or still
open in its workers), whether it runs or was stopped, and removes true orphans; the maintenance policy
follows its commits (`sinklab table follow`), compacting and expiring under it; no record is lost or
written twice."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from beside_apache import order_id_counts, wait_for
from faults import FaultProxy, publishes
from helpers import run_cli, sink_config, steady

from sinklab.maintenance import Target, clean
from sinklab.maintenance.retention import recovery_snapshots, snaps_of
from sinklab.sink.apache import takeover
from sinklab.sink.apache.control import read_events
from sinklab.sink.wire.apache_events import APACHE_CONTROL_TOPIC, PayloadType
from sinklab.stack import Stack
from sinklab.stack.apache_sink import ConnectWorker, connector_config, scratch_dir

pytestmark = pytest.mark.spark


@pytest.fixture()
def worker(stack: Stack) -> Iterator[ConnectWorker]:
    with ConnectWorker(stack, scratch_dir(stack)) as w:
        yield w


def table_of(stack: Stack, table: str):  # noqa: ANN201 - pyiceberg's Table
    return stack.catalog.load_table(tuple(table.split(".")))


def plant_orphan(stack: Stack, table: str) -> Path:
    """A copy of one of the table's data files that no snapshot references, an hour old."""
    source = Path(table_of(stack, table).inspect.files().column("file_path")[0].as_py().removeprefix("file:"))
    orphan = source.with_name(f"planted-{uuid.uuid4().hex}.parquet")
    shutil.copy(source, orphan)
    an_hour_ago = time.time() - 3600
    os.utime(orphan, (an_hour_ago, an_hour_ago))
    return orphan


def unreferenced(stack: Stack, table: str) -> set[Path]:
    """The table's data files on disk that none of its snapshots references: to the table, orphans."""
    loaded = table_of(stack, table)
    referenced = {Path(e.data_file.file_path.removeprefix("file:"))
                  for snap in loaded.metadata.snapshots for m in snap.manifests(loaded.io)
                  for e in m.fetch_manifest_entry(loaded.io, discard_deleted=False)}
    return set((Path(loaded.location().removeprefix("file:")) / "data").rglob("*.parquet")) - referenced


def in_every_round(stack: Stack, table: str, produced: list[str], worker: ConnectWorker, name: str) -> None:
    """Every record produced is in the table once (the read fails if a referenced file was deleted)."""
    wait_for(f"not every record in {table}", lambda: len(order_id_counts(stack, table)) >= len(produced), worker,
             name, 180)
    counts = order_id_counts(stack, table)
    assert sorted(counts) == sorted(produced)  # none missing
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n > 1}  # none twice


def test_cleaning_keeps_what_apaches_sink_wrote_and_has_not_committed(
        stack: Stack, worker: ConnectWorker, unique: str) -> None:
    """The catalog refuses Apache's table commits for a while (409: its coordinator tries again each round,
    its workers go on writing): its files since then are orphans to the table. A clean at age 0 while it
    runs keeps them (named ones, and those its workers hold open) and removes a planted orphan; the
    connector is stopped, its last round still uncommitted: a clean keeps the named files; started
    again, it commits them, and the table holds every record once."""
    stack.create_topic(unique, partitions=2)
    name, table = sink_config(unique)["name"], f"{unique}.pizzas"
    catalog = stack.info.catalog_uri.split("://", 1)[1].split("/", 1)[0]
    with FaultProxy(catalog) as proxy:
        config = connector_config(stack, name, unique, table, interval_ms=1000, tasks=1)
        config.update({"iceberg.tables.auto-create-enabled": "true",
                       "iceberg.catalog.uri": stack.info.catalog_uri.replace(catalog, proxy.address),
                       # 1.12 stops its coordinator at the first failed commit unless told otherwise.
                       "iceberg.control.commit.max-consecutive-failures": "1000"})
        with steady(stack, unique, 100) as produced:
            worker.add(config)
            wait_for("Apache's sink committed nothing", lambda: stack.catalog.table_exists((unique, "pizzas"))
                     and len(table_of(stack, table).metadata.snapshots) >= 2, worker, name)
            refused = proxy.fail(409, match=publishes)
            # Iceberg tries a commit 5 times before its coordinator gives the round up: two rounds given up.
            wait_for("no table commit refused", lambda: refused.hits >= 10, worker, name)
            orphan = plant_orphan(stack, table)
            in_flight = unreferenced(stack, table) - {orphan}
            assert len(in_flight) >= 2, in_flight  # two rounds' files at least
            target = Target.on(stack, table)
            running = clean(target, older_than_ms=0)
            assert not orphan.exists() and running.counts["orphan_files"] >= 1, running
            assert all(f.exists() for f in in_flight), running
            assert f"connect-{name} running" in (running.note or "") and "open round" in running.note, running

            worker.remove(name)  # its last rounds' files are named on its control topic only
            admin = stack.admin()
            wait_for("the connector's group kept members", lambda: not any(
                takeover.members(admin, g)[1] for g in (f"connect-{name}", f"connect-{name}-coord")), None, name, 60)
            orphan = plant_orphan(stack, table)
            # Its data-written events name them; a file it held open when stopped is an orphan (its records
            # are read again from the group's offsets, which its events did not move past).
            events, _ = read_events(stack.kafka_config(), [APACHE_CONTROL_TOPIC], group=f"connect-{name}")
            named = {Path(f["file_path"].removeprefix("file:")) for e in events if e.type == PayloadType.DATA_WRITTEN
                     for f in e.payload["data_files"]} & unreferenced(stack, table)
            assert len(named) >= 2, named
            stopped = clean(target, older_than_ms=0)
            assert not orphan.exists(), stopped
            assert all(f.exists() for f in named) and stopped.counts["kept_in_flight"] == len(named), stopped
            assert f"connect-{name} stopped" in (stopped.note or ""), stopped
            proxy.clear()
            worker.add(config)  # started again: its coordinator commits what its control topic names
            worker.wait_assigned(name, unique)
            time.sleep(2)
        in_every_round(stack, table, produced, worker, name)


def test_the_policy_follows_apaches_sink_compacting_and_expiring_under_it(
        stack: Stack, stack_file: Path, worker: ConnectWorker, unique: str, tmp_path: Path) -> None:
    """`sinklab table follow` with a policy in the connector's own config (Apache's sink ignores the keys):
    compaction every 4 of its commits, expiry of everything older than 1 s, orphans older than 0 s, while
    it commits every second under a steady stream. The policy ran (its reports), the table keeps Apache's
    newest commit with its control offsets, and every record is in it once."""
    stack.create_topic(unique, partitions=2)
    name, table = sink_config(unique)["name"], f"{unique}.pizzas"
    config = connector_config(stack, name, unique, table, interval_ms=1000, tasks=1)
    config.update({"iceberg.tables.auto-create-enabled": "true",
                   "sinklab.maintenance.compact.every-commits": "4",
                   "sinklab.maintenance.expire.older-than": "1s",
                   "sinklab.maintenance.orphans.older-than": "0s"})
    config_file = tmp_path / "connector.json"
    config_file.write_text(json.dumps({"name": name, "config": config}))  # Connect's REST shape
    with steady(stack, unique, 100) as produced:
        worker.add(config)
        wait_for("Apache's sink made no table", lambda: stack.catalog.table_exists((unique, "pizzas")), worker, name)
        ran = run_cli("table", "follow", "--config", str(config_file), "--stack", str(stack_file), "--poll", "1s",
                      "--seconds", "45", "--json")
        worker.check(name)
    assert ran.returncode == 0, ran.stderr[-3000:]
    reports = [json.loads(line) for line in ran.stdout.splitlines() if line.startswith("{")]
    by_kind: dict[str, list[dict]] = {}
    for r in reports:
        by_kind.setdefault(r["operation"], []).append(r)
    assert {"compact", "expire", "clean"} <= set(by_kind), ran.stdout
    assert sum(r["counts"]["rewritten_data_files"] for r in by_kind["compact"]) > 0, by_kind["compact"]
    assert sum(r["counts"]["expired_snapshots"] for r in by_kind["expire"]) > 0, by_kind["expire"]
    assert all(r["table"] == table for r in reports)
    in_every_round(stack, table, produced, worker, name)
    snaps, refs = snaps_of(table_of(stack, table).metadata)
    held = recovery_snapshots(snaps, refs)
    assert any(sink.startswith("Apache's ") for _, sink in held), held
