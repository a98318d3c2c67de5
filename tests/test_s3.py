"""The embedded stack with its warehouse on S3: a real moto server, Spark through Iceberg's S3FileIO,
pyiceberg through pyarrow's S3 filesystem, and the unchanged sink writing into the bucket."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from helpers import produce_raw

from sinklab.exceptions import S3NotAvailable
from sinklab.generators import pizza_events, produce_json
from sinklab.sink import IcebergSink
from sinklab.stack import SparkSettings, Stack, StackInfo, jars, stop_recorded
from sinklab.stack.process import pid_alive
from sinklab.stack.s3 import DEFAULT_BUCKET
from sinklab.stack.spark import S3_FILE_IO, spark_jars


@pytest.fixture(scope="module")
def s3_stack(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # One Spark driver per process, and its classpath is fixed at JVM start: the session stack's
    # Spark (no S3FileIO bundle) steps aside and starts again on its next use.
    stack.stop_spark()
    with Stack.embedded(tmp_path_factory.mktemp("s3stack"), storage="s3") as s:
        yield s
        from pyspark import SparkContext

        jvm = getattr(SparkContext._gateway, "proc", None)
    # Closing the stack stopped its Spark's JVM too, so the next stack's Spark gets its own.
    assert jvm is None or jvm.poll() is not None


def s3_client(stack: Stack) -> Any:
    props = stack.info.catalog_properties
    return boto3.client("s3", endpoint_url=props["s3.endpoint"], region_name=props["s3.region"],
                        aws_access_key_id=props["s3.access-key-id"],
                        aws_secret_access_key=props["s3.secret-access-key"])


def bucket_keys(stack: Stack) -> set[str]:
    client = s3_client(stack)
    keys: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=DEFAULT_BUCKET):
        keys |= {obj["Key"] for obj in page.get("Contents", [])}
    return keys


def sink_config(unique: str) -> dict[str, Any]:
    return {"name": f"sink-{unique}", "config": {
        "topics": unique, "iceberg.tables": f"{unique}.pizzas", "iceberg.catalog": "sinklab",
        "iceberg.tables.auto-create-enabled": "true", "iceberg.control.commit.interval-ms": "500",
        "value.converter.schemas.enable": "false"}}


@pytest.mark.spark
def test_sink_writes_into_the_bucket(s3_stack: Stack, unique: str, tmp_path: Path) -> None:
    stack = s3_stack
    stack.create_topic(unique, partitions=3)
    events = list(pizza_events(2000, seed=3))
    produce_json(stack.bootstrap_servers, unique, events, key_field="order_id")
    sink = IcebergSink(stack, sink_config(unique))
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.records == 2000
    ids = sorted(e["order_id"] for e in events)

    # Spark, through S3FileIO.
    rows = stack.spark.table(f"sinklab.{unique}.pizzas").select("order_id").collect()
    assert sorted(r.order_id for r in rows) == ids

    # pyiceberg, through pyarrow's S3 filesystem, with the stack's properties...
    table = stack.catalog.load_table((unique, "pizzas"))
    assert table.location().startswith(f"s3://{DEFAULT_BUCKET}/warehouse/")
    assert sorted(table.scan().to_arrow()["order_id"].to_pylist()) == ids
    # ...and knowing where the S3 server is but no credentials: Apache's server vends them in each
    # load-table config (include-credentials).
    from pyiceberg.catalog.rest import RestCatalog

    props = stack.info.catalog_properties
    bare = RestCatalog("bare", uri=stack.info.catalog_uri, **{
        k: props[k] for k in ("s3.endpoint", "s3.region", "s3.path-style-access")})
    vended = bare.load_table((unique, "pizzas"))
    assert vended.io.properties["s3.access-key-id"] == props["s3.access-key-id"]
    assert vended.scan().to_arrow().num_rows == 2000

    # Every data file and the metadata file are objects in the S3 server, and nothing is on disk.
    data_files = [task.file.file_path for task in table.scan().plan_files()]
    assert data_files and all(p.startswith(f"s3://{DEFAULT_BUCKET}/") for p in data_files)
    keys = bucket_keys(stack)
    prefix = f"s3://{DEFAULT_BUCKET}/"
    assert {p.removeprefix(prefix) for p in data_files} <= keys
    assert table.metadata_location.removeprefix(prefix) in keys
    assert stack.workdir is not None
    assert not list(stack.workdir.rglob("*.parquet")) and not (stack.workdir / "warehouse").exists()

    # A separate process that knows only stack.json (a second JVM, set up from it alone) appends.
    more = list(pizza_events(500, seed=4))
    produce_json(stack.bootstrap_servers, unique, more, key_field="order_id")
    config = tmp_path / "sink.json"
    config.write_text(json.dumps(sink_config(unique)))
    run = subprocess.run(
        [sys.executable, "-m", "sinklab.cli", "sink", "run", "--config", str(config),
         "--stack", str(stack.write(tmp_path / "stack.json")), "--once"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "committed 500 records" in run.stdout
    table = stack.catalog.load_table((unique, "pizzas"))
    assert sorted(table.scan().to_arrow()["order_id"].to_pylist()) == sorted(ids + [e["order_id"] for e in more])
    assert len(table.metadata.snapshots) == 2


@pytest.mark.spark
def test_dead_letters_land_in_their_table_in_the_bucket(s3_stack: Stack, unique: str) -> None:
    # The driver appends dead letters itself (pyiceberg through pyarrow's S3 filesystem): they must land
    # in the bucket beside the data, and Spark must read them through S3FileIO.
    stack = s3_stack
    stack.create_topic(unique, partitions=1)
    produce_raw(stack, unique, [json.dumps(e).encode() for e in pizza_events(20, seed=5)] + [b"{not json"])
    config = sink_config(unique)
    config["config"] |= {"errors.tolerance": "all", "errors.deadletterqueue.table.name": f"{unique}.dead_letters"}
    sink = IcebergSink(stack, config)
    try:
        result = sink.run_once()
    finally:
        sink.stop()
    assert result is not None and result.counters["dead-lettered"] == 1
    letters = stack.spark.table(f"sinklab.{unique}.dead_letters").collect()
    assert [(r.source_offset, bytes(r.value), r.error_class) for r in letters] == [(20, b"{not json", "malformed-json")]
    assert stack.spark.table(f"sinklab.{unique}.pizzas").count() == 20
    staged = result.tables[f"{unique}.dead_letters"]
    where = f"s3://{DEFAULT_BUCKET}/warehouse/{unique}/"
    assert staged.data_files and all(f.startswith(where) for f in staged.data_files)
    assert {f.removeprefix(f"s3://{DEFAULT_BUCKET}/") for f in staged.data_files} <= bucket_keys(stack)


def test_spark_sql_round_trip_on_s3(s3_stack: Stack, unique: str) -> None:
    spark = s3_stack.spark
    spark.sql(f"CREATE NAMESPACE sinklab.{unique}")
    spark.sql(f"CREATE TABLE sinklab.{unique}.t (id BIGINT, name STRING) USING iceberg")
    spark.sql(f"INSERT INTO sinklab.{unique}.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql(f"DELETE FROM sinklab.{unique}.t WHERE id = 2")
    assert [r.id for r in spark.table(f"sinklab.{unique}.t").orderBy("id").collect()] == [1, 3]
    assert sorted(s3_stack.catalog.load_table((unique, "t")).scan().to_arrow()["id"].to_pylist()) == [1, 3]
    keys = bucket_keys(s3_stack)
    assert any(k.startswith(f"warehouse/{unique}/t/data/") for k in keys)


def test_closing_the_stack_stops_the_s3_server(tmp_path: Path) -> None:
    with Stack.embedded(tmp_path / "stk", storage="s3") as stack:
        pids = dict(stack.info.pids)
        assert set(pids) == {"broker", "catalog", "s3", "connect"}
        endpoint = stack.info.catalog_properties["s3.endpoint"]
        assert DEFAULT_BUCKET in {b["Name"] for b in s3_client(stack).list_buckets()["Buckets"]}
        config = requests.get(stack.info.catalog_uri + "/v1/config", timeout=5)
        assert config.status_code == 200
    assert not any(pid_alive(pid) for pid in pids.values())
    with pytest.raises(requests.ConnectionError):
        requests.get(endpoint, timeout=2)


def test_cli_stack_up_with_s3_storage(tmp_path: Path) -> None:
    workdir = tmp_path / "stk"

    def sinklab(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sinklab.cli", *args], capture_output=True, text=True,
                              timeout=120)

    up = sinklab("stack", "up", "--workdir", str(workdir), "--storage", "s3")
    info = None
    try:
        assert up.returncode == 0, up.stderr
        info = StackInfo.model_validate_json((workdir / "stack.json").read_text())
        assert set(info.pids) == {"broker", "catalog", "s3", "connect"}
        assert all(pid_alive(p) for p in info.pids.values())
        assert info.warehouse == f"s3://{DEFAULT_BUCKET}/warehouse"
        assert requests.get(info.catalog_properties["s3.endpoint"], timeout=5).status_code == 200
        assert "s3" in up.stdout

        down = sinklab("stack", "down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stderr
        assert "s3" in down.stdout
        assert not any(pid_alive(p) for p in info.pids.values())
    finally:
        if info is not None:
            stop_recorded(info)


def test_bad_storage_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="storage must be one of local, s3"):
        Stack.embedded(tmp_path, storage="hdfs")  # type: ignore[arg-type]
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "moto.server", None)  # as if the s3 extra were not installed
        with pytest.raises(S3NotAvailable, match=r"pip install 'sinklab\[s3\]'"):
            Stack.embedded(tmp_path / "never", storage="s3")
    assert not (tmp_path / "never").exists()
    result = subprocess.run([sys.executable, "-m", "sinklab.cli", "stack", "up", "--workdir", str(tmp_path),
                             "--storage", "hdfs"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "invalid choice: 'hdfs'" in result.stderr


# ---- how Spark gets Iceberg's S3FileIO (no Spark started)

def test_s3_settings_use_iceberg_s3fileio() -> None:
    stack = Stack.external("127.0.0.1:9092", "http://127.0.0.1:8181", "s3://warehouse/",
                           catalog_properties={"s3.endpoint": "http://minio:9000", "s3.path-style-access": "true"})
    assert stack.uses_s3
    conf = stack.spark_catalog_conf("demo")
    assert conf["spark.sql.catalog.demo.io-impl"] == S3_FILE_IO
    assert conf["spark.sql.catalog.demo.s3.endpoint"] == "http://minio:9000"
    assert not any("s3a" in key or "hadoop." in key for key in conf)
    # A cluster's own io-impl stays.
    own = Stack.external("127.0.0.1:9092", "http://127.0.0.1:8181", "s3://warehouse/",
                         catalog_properties={"s3.endpoint": "http://x", "io-impl": "com.example.MyFileIO"})
    assert own.spark_catalog_conf("demo")["spark.sql.catalog.demo.io-impl"] == "com.example.MyFileIO"
    assert not Stack.external("127.0.0.1:9092", "http://127.0.0.1:8181", "file:///tmp/wh").uses_s3


def test_s3_jars_resolution(tmp_path: Path) -> None:
    # sinklab's pinned coordinates, resolved into the cache by make setup.
    resolved = spark_jars(SparkSettings(), s3=True)["spark.jars"].split(",")
    kafka_source = [str(j) for j in jars.jars(jars.SPARK_KAFKA)]
    avro = [str(j) for j in jars.jars(jars.SPARK_AVRO)]
    assert [Path(j).name for j in resolved] == [f"iceberg-spark-runtime-4.1_2.13-{jars.ICEBERG_VERSION}.jar",
                                                *[Path(j).name for j in kafka_source],
                                                *[Path(j).name for j in avro],
                                                f"iceberg-aws-bundle-{jars.ICEBERG_VERSION}.jar"]
    assert all(Path(j).is_file() for j in resolved)
    assert "iceberg-aws-bundle" not in spark_jars(SparkSettings(), s3=False)["spark.jars"]

    # Your own S3 jars replace sinklab's.
    own = [str(tmp_path / "iceberg-aws-bundle-1.9.0.jar")]
    assert spark_jars(SparkSettings(s3_jars=own), s3=True)["spark.jars"].split(",")[1:] == [*kafka_source, *avro,
                                                                                                   *own]

    # Coordinates for Spark to resolve: the bundle added once.
    conf = spark_jars(SparkSettings(packages=[jars.SPARK_ICEBERG.coordinates[0]]), s3=True)
    assert conf["spark.jars.packages"].split(",")[1:] == [jars.SPARK_KAFKA.coordinates[0],
                                                          jars.SPARK_AVRO.coordinates[0], jars.SPARK_S3.coordinates[0]]
    assert "spark.jars" not in conf
    conf = spark_jars(SparkSettings(packages=["x:y:1", "org.apache.iceberg:iceberg-aws-bundle:1.9.0"]), s3=True)
    assert conf["spark.jars.packages"].count("iceberg-aws-bundle") == 1
