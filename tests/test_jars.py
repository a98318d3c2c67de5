"""JVM parts by Maven coordinate: resolved with PySpark's Ivy, reused offline, or a user's own folder."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from sinklab.stack import jars


def test_every_part_is_pinned_and_cached() -> None:
    for part in jars.PARTS.values():
        for coordinate in part.coordinates:
            group, artifact, version, *_classifier = coordinate.split(":")
            assert version and not version.endswith(("+", "SNAPSHOT", "]")), coordinate
        found = jars.jars(part)  # make setup resolved them
        assert found and all(j.is_file() and j.suffix == ".jar" for j in found)
    names = [j.name for j in jars.jars(jars.KAFKA)]
    assert f"kafka_2.13-{jars.KAFKA_VERSION}.jar" in names and any(n.startswith("kafka-clients-") for n in names)
    rest = [j.name for j in jars.jars(jars.ICEBERG_REST)]
    # 1.11 publishes the server's classes, not its shaded jar: the fixture, core's tests jar, and what they run on
    # (1.12 neither: the server stays at 1.11).
    v = jars.ICEBERG_REST_VERSION
    assert {f"iceberg-open-api-{v}-test-fixtures.jar", f"iceberg-core-{v}-tests.jar", f"iceberg-core-{v}.jar",
            f"jetty-ee10-servlet-{jars.JETTY_VERSION}.jar"} <= set(rest)


def test_spark_parts_are_the_spark_4_1_line_on_scala_2_13() -> None:
    spark_parts = [jars.SPARK_ICEBERG, jars.SPARK_KAFKA, jars.SPARK_AVRO]
    scala = [c for p in spark_parts for c in p.coordinates if re.search(r"_2\.1\d:", c)]
    assert scala and all("_2.13:" in c for c in scala), scala
    assert jars.SPARK_ICEBERG.coordinates[0].startswith("org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:")
    import pyspark

    # Spark's own jars at pyspark's version: one Spark on the classpath.
    assert all(c.endswith(f":{pyspark.__version__}") for c in scala if c.startswith("org.apache.spark:"))


def test_the_cache_is_reused_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A repository nothing listens on: resolving would fail, reading the cache does not.
    monkeypatch.setenv(jars.REPO_ENV, "http://127.0.0.1:9/maven2/")
    monkeypatch.setattr(jars, "resolve", lambda part: pytest.fail(f"{part.name} resolved again"))
    assert jars.jars(jars.SPARK_ICEBERG)[0].name.startswith("iceberg-spark-runtime-4.1_2.13-")


def test_a_coordinate_that_cannot_be_fetched_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path / "cache"))
    missing = jars.Part("nothing", ("org.apache.iceberg:iceberg-no-such-module:1.10.1",), transitive=False)
    with pytest.raises(jars.JarsNotFound, match="org.apache.iceberg:iceberg-no-such-module:1.10.1") as err:
        jars.jars(missing)
    assert jars.JARS_DIR_ENV in str(err.value)
    assert not list((tmp_path / "cache").glob("classpaths/*.txt"))  # nothing half-resolved is reused


def test_parts_sharing_an_artifact_resolve_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sinklab jars fetch` resolves parts at once, each with its own Ivy process on one cache."""
    import zipfile

    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path / "cache"))
    shared = "org.apache.commons:commons-pool2:2.12.1"
    parts = [jars.Part("one", (shared,), transitive=False),
             jars.Part("two", (shared, f"org.apache.spark:spark-avro_2.13:{jars.SPARK_VERSION}"), transitive=False)]
    ready = {part.name: found for part, found, _ in jars.fetch(parts)}
    assert sorted(j.name for j in ready["one"]) == ["commons-pool2-2.12.1.jar"]
    avro = f"spark-avro_2.13-{jars.SPARK_VERSION}.jar"
    assert sorted(j.name for j in ready["two"]) == ["commons-pool2-2.12.1.jar", avro]
    for jar in ready["one"] + ready["two"]:
        assert zipfile.ZipFile(jar).testzip() is None  # whole, though both wanted it at once
    monkeypatch.setattr(jars, "resolve", lambda part: pytest.fail(f"{part.name} resolved again"))
    assert [j.name for j in jars.jars(parts[0])] == ["commons-pool2-2.12.1.jar"]  # and cached


def test_own_jar_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exported = jars.export(tmp_path / "airgap", [jars.SPARK_ICEBERG])
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(exported))
    assert jars.jars(jars.SPARK_ICEBERG) == sorted((exported / "spark-iceberg").glob("*.jar"))
    with pytest.raises(jars.JarsNotFound, match=rf"no iceberg-aws-bundle-{jars.ICEBERG_VERSION}\*\.jar for "
                                                rf"org.apache.iceberg:iceberg-aws-bundle:{jars.ICEBERG_VERSION}"):
        jars.jars(jars.SPARK_S3)


def test_the_java_sink_is_fetched_only_on_demand() -> None:
    # `make setup` and `sinklab jars fetch` with no names fetch PARTS: the bench's peer is not one.
    assert jars.JAVA_SINK.name not in jars.PARTS and jars.BENCH_PARTS[jars.JAVA_SINK.name] is jars.JAVA_SINK
    module = jars._module_xml(jars.JAVA_SINK)
    assert f'name="iceberg-kafka-connect" rev="{jars.ICEBERG_VERSION}"' in module
    assert '<exclude org="org.slf4j" module="slf4j-reload4j"/>' in module  # one logging binding: log4j2's
    assert 'name="iceberg-orc"' in module  # from 1.11 iceberg-data loads every file format at start
    # Exclusions name a listing of their own; a part without them keeps the name it had before.
    plain = jars.Part("x", ("a:b:1",))
    assert jars._listing(plain).name == f"x-{hashlib.sha256(b'True:a:b:1').hexdigest()[:12]}.txt"
    assert jars._listing(plain) != jars._listing(jars.Part("x", ("a:b:1",), excludes=("c:*",)))


def test_the_built_registry_is_exported_beside_the_parts_and_found_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sinklab.stack import registry_build

    exported = registry_build.export(tmp_path / "airgap")  # make setup built it
    assert exported == tmp_path / "airgap" / "schema-registry" and list((exported / "lib").rglob("*.jar"))
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "airgap"))
    assert registry_build.runner_jar() == exported / registry_build.RUNNER
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(jars.JarsNotFound, match=r"no schema-registry/apicurio-registry-runner\.jar"):
        registry_build.runner_jar()


def test_two_processes_wanting_the_registry_build_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from sinklab.stack import registry_build

    monkeypatch.setenv(jars.CACHE_ENV, str(tmp_path / "cache"))
    builds: list[Path] = []

    def slow_build(out: Path) -> None:  # stands in for the minute-long Quarkus build
        builds.append(out)
        time.sleep(0.5)
        out.mkdir(parents=True)
        (out / registry_build.RUNNER).write_bytes(b"jar")
        (out / "complete").write_text("done")

    monkeypatch.setattr(registry_build, "_build_in_subprocess", slow_build)
    found: list[Path] = []
    threads = [threading.Thread(target=lambda: found.append(registry_build.runner_jar())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(builds) == 1 and found == [builds[0] / registry_build.RUNNER] * 2


def test_fetch_without_names_leaves_the_schema_registry_to_its_first_use(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`make setup` (and so `make demo`) fetches the stack's parts; building the registry, a minute and
    more the demo never uses, is left to a stack that starts one, `make setup-all` and `make test`."""
    import argparse

    from sinklab import cli
    from sinklab.stack import registry_build

    fetched: list[str] = []
    built: list[bool] = []
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    runner = tmp_path / "schema-registry" / "runner.jar"
    runner.parent.mkdir()
    runner.write_bytes(b"x")
    monkeypatch.setattr(jars, "jars", lambda part: fetched.append(part.name) or [jar])
    monkeypatch.setattr(registry_build, "runner_jar", lambda: built.append(True) or runner)

    assert cli.cmd_jars_fetch(argparse.Namespace(parts=[], all=False)) == 0
    assert sorted(fetched) == sorted(jars.PARTS) and not built  # side by side: in any order
    fetched.clear()
    assert cli.cmd_jars_fetch(argparse.Namespace(parts=["schema-registry"], all=False)) == 0
    assert fetched == [] and built == [True]
    assert "schema-registry" in capsys.readouterr().out
    # --all (make workshop-prep): every part, Apache's sink (notebook 11) and the registry (notebook 10) too.
    fetched.clear()
    built.clear()
    assert cli.main(["jars", "fetch", "--all"]) == 0
    assert sorted(fetched) == sorted(jars.PARTS | jars.BENCH_PARTS) and built == [True]
    assert cli.main(["jars", "fetch", "--all", "kafka"]) == 1
    assert "--all or part names" in capsys.readouterr().err
