"""The sink on a Spark standalone cluster (a master and two workers on this machine): executors in
their own JVMs, and exactly once across a kill of the driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import order_ids, produce, run_cli, sink_config

from sinklab.sink.cycle import coordinator as coordinator_module
from sinklab.stack import Stack
from sinklab.stack.cluster import StandaloneCluster

pytestmark = pytest.mark.spark


def _executor_dirs(cluster: StandaloneCluster) -> dict[str, list[Path]]:
    """Per worker, the executor directories its apps left (``work-dir/app-*/<executor id>``)."""
    return {worker.name: sorted(Path(worker.argv[worker.argv.index("--work-dir") + 1]).glob("app-*/*"))
            for worker in cluster.workers}


def test_sink_on_a_standalone_cluster_is_exactly_once_across_a_driver_kill(
        stack: Stack, stack_file: Path, tmp_path: Path, unique: str) -> None:
    stack.create_topic(unique, partitions=2)
    table = f"{unique}.pizzas"
    # A transform in the chain: its Spark expressions run on the executors like the rest of the cycle.
    config = sink_config(unique, [table], **{
        "transforms": "meta", "transforms.meta.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform"})
    config_file = tmp_path / "sink.json"
    config_file.write_text(json.dumps(config))
    ids = produce(stack, unique, 3000, seed=7)

    with StandaloneCluster(tmp_path / "cluster", workers=2) as cluster:
        spark = ["--master", cluster.master_url, "--conf", "spark.executor.memory=768m",
                 "--conf", "spark.executor.cores=1"]
        # The driver dies after the table commit, before the Kafka transaction commits its offsets.
        crashed = run_cli("sink", "run", "--config", str(config_file), "--stack", str(stack_file), *spark, "--once",
                          env={coordinator_module.CRASH_ENV: "after-table-commits"})
        assert crashed.returncode == 86, crashed.stderr[-3000:]
        assert sorted(order_ids(stack, table)) == sorted(ids)  # landed, but Kafka does not know yet
        more = produce(stack, unique, 2000, seed=8)
        recovered = run_cli("sink", "run", "--config", str(config_file), "--stack", str(stack_file), *spark,
                            "--until-idle", "2")
        assert recovered.returncode == 0, recovered.stderr[-3000:]
        executors = _executor_dirs(cluster)

    # Both runs' executors ran in the workers' JVMs, on both workers; none in the driver.
    assert all(len(dirs) >= 2 for dirs in executors.values()), executors
    assert all((d / "stderr").is_file() for dirs in executors.values() for d in dirs)
    rows = stack.spark.table(f"sinklab.{table}").select(
        "order_id", "_kafka_metadata_partition", "_kafka_metadata_offset").collect()
    assert sorted(r.order_id for r in rows) == sorted(ids + more)
    assert len({(r._kafka_metadata_partition, r._kafka_metadata_offset) for r in rows}) == len(rows) == 5000
    refs = stack.catalog.load_table((unique, "pizzas")).metadata.refs
    assert list(refs) == ["main"]
