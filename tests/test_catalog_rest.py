"""Apache's REST catalog server, as the embedded stack runs it, with two independent clients: pyiceberg and
Spark (Java RESTCatalog)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.table.update import AssertRefSnapshotId, SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField, StringType

from sinklab.stack import Stack
from sinklab.stack.catalog import EmbeddedCatalog

pytestmark = pytest.mark.spark


def test_namespaces_from_both_clients(stack: Stack, unique: str) -> None:
    cat, spark = stack.catalog, stack.spark
    cat.create_namespace((unique, "bronze"), {"owner": "pyiceberg"})
    spark.sql(f"CREATE NAMESPACE sinklab.{unique}.silver WITH DBPROPERTIES ('team'='spark')")

    assert sorted(cat.list_namespaces((unique,))) == [(unique, "bronze"), (unique, "silver")]
    shown = {r[0] for r in spark.sql(f"SHOW NAMESPACES IN sinklab.{unique}").collect()}
    assert shown == {f"{unique}.bronze", f"{unique}.silver"}
    assert cat.load_namespace_properties((unique, "silver"))["team"] == "spark"

    spark.sql(f"ALTER NAMESPACE sinklab.{unique}.bronze SET DBPROPERTIES ('tier'='1')")
    summary = cat.update_namespace_properties((unique, "bronze"), removals={"owner", "nope"}, updates={"x": "y"})
    assert summary.removed == ["owner"] and summary.missing == ["nope"]
    # The JDBC catalog adds each namespace's default location.
    assert cat.load_namespace_properties((unique, "bronze")).items() >= {"tier": "1", "x": "y"}.items()

    assert cat.namespace_exists((unique, "bronze"))
    with pytest.raises(NamespaceAlreadyExistsError):
        cat.create_namespace((unique, "bronze"))
    cat.create_table((unique, "silver", "keep"), Schema(NestedField(1, "id", LongType(), required=False)))
    with pytest.raises(NamespaceNotEmptyError):
        cat.drop_namespace((unique, "silver"))
    cat.drop_namespace((unique, "bronze"))
    assert not cat.namespace_exists((unique, "bronze"))
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties((unique, "bronze"))


def test_partitioned_v2_table_both_ways(stack: Stack, unique: str) -> None:
    cat, spark = stack.catalog, stack.spark
    spark.sql(f"CREATE NAMESPACE sinklab.{unique}")
    spark.sql(
        f"CREATE TABLE sinklab.{unique}.orders (id BIGINT, store STRING, ts TIMESTAMP) USING iceberg "
        "PARTITIONED BY (days(ts), bucket(4, id)) TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(
        f"INSERT INTO sinklab.{unique}.orders VALUES (1, 'a', TIMESTAMP'2024-01-04 12:28:13'), "
        "(2, 'b', TIMESTAMP'2024-01-05 08:00:00')"
    )
    table = cat.load_table((unique, "orders"))
    assert table.format_version == 2
    assert [f.transform.__class__.__name__ for f in table.spec().fields] == ["DayTransform", "BucketTransform"]
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2]

    arrow_schema = table.schema().as_arrow()
    table.append(pa.table({"id": [3], "store": ["c"], "ts": pa.array([1704400000000000], pa.timestamp("us", tz="UTC"))},
                          schema=arrow_schema))
    rows = spark.sql(f"SELECT id FROM sinklab.{unique}.orders ORDER BY id").collect()
    assert [r.id for r in rows] == [1, 2, 3]
    assert spark.sql(f"SELECT count(*) AS n FROM sinklab.{unique}.orders.snapshots").first().n == 2


def test_schema_changes_rename_and_purge(stack: Stack, unique: str) -> None:
    cat, spark = stack.catalog, stack.spark
    cat.create_namespace(unique)
    spark.sql(f"CREATE TABLE sinklab.{unique}.t (id BIGINT) USING iceberg")
    spark.sql(f"ALTER TABLE sinklab.{unique}.t ADD COLUMN from_spark STRING")
    with cat.load_table((unique, "t")).update_schema() as update:
        update.add_column("from_pyiceberg", StringType())
    spark.sql(f"INSERT INTO sinklab.{unique}.t VALUES (1, 's', 'p')")
    assert spark.table(f"sinklab.{unique}.t").columns == ["id", "from_spark", "from_pyiceberg"]
    assert [f.name for f in cat.load_table((unique, "t")).schema().fields] == ["id", "from_spark", "from_pyiceberg"]

    spark.sql(f"ALTER TABLE sinklab.{unique}.t RENAME TO {unique}.t2")
    cat.rename_table((unique, "t2"), (unique, "t3"))
    assert cat.list_tables(unique) == [(unique, "t3")]
    assert spark.table(f"sinklab.{unique}.t3").count() == 1

    data_files = [Path(p.removeprefix("file:")) for p in
                  cat.load_table((unique, "t3")).inspect.files().column("file_path").to_pylist()]
    assert data_files and all(p.exists() for p in data_files)
    spark.sql(f"DROP TABLE sinklab.{unique}.t3 PURGE")
    assert not cat.table_exists((unique, "t3"))
    assert not any(p.exists() for p in data_files)


def test_stage_create_and_register(stack: Stack, unique: str) -> None:
    cat, spark = stack.catalog, stack.spark
    cat.create_namespace(unique)
    # Spark's CTAS goes through a staged create: nothing exists until the first commit.
    spark.sql(f"CREATE TABLE sinklab.{unique}.ctas USING iceberg AS SELECT id FROM range(5)")
    assert cat.load_table((unique, "ctas")).scan().to_arrow().num_rows == 5
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    with cat.create_table_transaction((unique, "staged"), schema) as txn:
        txn.set_properties(created_by="pyiceberg-transaction")
    assert cat.load_table((unique, "staged")).properties["created_by"] == "pyiceberg-transaction"

    location = cat.load_table((unique, "ctas")).metadata_location
    cat.register_table((unique, "again"), location)
    assert spark.table(f"sinklab.{unique}.again").count() == 5
    with pytest.raises(TableAlreadyExistsError):
        cat.register_table((unique, "again"), location)


def test_concurrent_commits_lose_nothing(stack: Stack, unique: str) -> None:
    cat, spark = stack.catalog, stack.spark
    cat.create_namespace(unique)
    table = cat.create_table((unique, "c"), Schema(NestedField(1, "id", LongType(), required=False)),
                             properties={"commit.retry.num-retries": "50"})
    stale = cat.load_table((unique, "c"))
    spark.sql(f"INSERT INTO sinklab.{unique}.c VALUES (0)")
    # A commit asserting a snapshot that is no longer current gets 409 ...
    with pytest.raises(CommitFailedException):
        stale.catalog.commit_table(
            stale, (AssertRefSnapshotId(ref="main", snapshot_id=None),), (SetPropertiesUpdate(updates={"a": "b"}),)
        )
    # ... and the client's retry (pyiceberg refreshes and re-applies) lands on top.
    stale.append(pa.table({"id": pa.array([-1], pa.int64())}))

    rounds = 8
    errors: list[BaseException] = []

    def pyiceberg_writer() -> None:
        try:
            for i in range(rounds):
                table.append(pa.table({"id": pa.array([1000 + i], pa.int64())}))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=pyiceberg_writer)
    thread.start()
    for i in range(rounds):
        # Java's RESTCatalog retries a 409 itself.
        spark.sql(f"INSERT INTO sinklab.{unique}.c VALUES ({i + 1})")
    thread.join()
    assert not errors
    ids = sorted(r.id for r in spark.table(f"sinklab.{unique}.c").collect())
    assert ids == [-1, 0, *range(1, rounds + 1), *range(1000, 1000 + rounds)]


def test_server_restart_keeps_everything(stack: Stack, unique: str, tmp_path: Path) -> None:
    catalog = EmbeddedCatalog(tmp_path)
    catalog.start()
    try:
        client = RestCatalog("r", uri=catalog.uri, warehouse=catalog.warehouse)
        client.create_namespace((unique, "deep"), {"k": "v"})
        t = client.create_table((unique, "deep", "t"), Schema(NestedField(1, "id", LongType(), required=False)))
        t.append(pa.table({"id": pa.array([1, 2, 3], pa.int64())}))
        before = client.load_table((unique, "deep", "t")).metadata_location
        catalog.stop()
        catalog = EmbeddedCatalog(tmp_path, port=catalog.port)
        catalog.start()
        client = RestCatalog("r", uri=catalog.uri, warehouse=catalog.warehouse)
        assert client.load_namespace_properties((unique, "deep"))["k"] == "v"
        reloaded = client.load_table((unique, "deep", "t"))
        assert reloaded.metadata_location == before
        assert reloaded.scan().to_arrow().num_rows == 3
    finally:
        catalog.stop()


def test_bad_requests_get_spec_errors(stack: Stack, unique: str) -> None:
    base = stack.info.catalog_uri + "/v1"
    stack.catalog.create_namespace(unique)

    def check(resp: requests.Response, status: int, type_: str) -> None:
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert error["code"] == status and error["type"] == type_ and error["message"]

    # (A body that is not JSON gets Jetty's HTML error page with status 500 from Apache's server.)
    check(requests.post(f"{base}/namespaces", json={"namespace": [unique]}), 409, "AlreadyExistsException")
    check(requests.get(f"{base}/namespaces/nope{unique}"), 404, "NoSuchNamespaceException")
    check(requests.get(f"{base}/namespaces/{unique}/tables/nope"), 404, "NoSuchTableException")
    check(requests.post(f"{base}/namespaces/{unique}/tables", json={"name": "x"}), 400, "IllegalArgumentException")
    check(requests.post(f"{base}/namespaces/{unique}/tables/nope", json={"requirements": [], "updates": []}),
          404, "NoSuchTableException")
    stack.catalog.create_table((unique, "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    check(requests.post(f"{base}/namespaces/{unique}/tables/t", json={
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 42}], "updates": []}),
        409, "CommitFailedException")
    # The spec says 204; Apache's server answers 200, which clients take as "exists" too.
    assert requests.head(f"{base}/namespaces/{unique}/tables/t").status_code in (200, 204)
    assert requests.head(f"{base}/namespaces/{unique}/tables/nope").status_code == 404
    config = requests.get(f"{base}/config").json()
    assert "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}" in config["endpoints"]


def test_missing_table_errors_in_both_clients(stack: Stack, unique: str) -> None:
    with pytest.raises(NoSuchTableError):
        stack.catalog.load_table((unique, "missing"))
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException):
        stack.spark.table(f"sinklab.{unique}.missing")
