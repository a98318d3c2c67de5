"""The Spark driver's class archive: trained once, mapped by every driver sinklab starts, ignored
safely when it does not fit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sinklab.stack import jars, jvm_archive

SESSION = "org.apache.spark.sql.classic.SparkSession"
ICEBERG = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"


def classes_loaded(tmp_path: Path, **env: str) -> str:
    """The class-loading log of a driver that build_spark starts in a process of its own."""
    loads = tmp_path / "classes.log"
    code = ("from pathlib import Path; from sinklab.stack.spark import SparkSettings, build_spark, stop_spark; "
            f"s = build_spark(SparkSettings(master='local[1]'), {{}}, log_file=Path({str(tmp_path / 'spark.log')!r})); "
            "s.range(3).count(); stop_spark(s)")
    opts = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Xlog:class+load=info:file={loads}"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "SPARK_SUBMIT_OPTS": opts, **env}, check=True,
                   timeout=300)
    return loads.read_text()


@pytest.mark.spark
def test_a_driver_maps_the_trained_archive(tmp_path: Path) -> None:
    archive = jvm_archive.path()
    assert archive.exists(), "conftest trains it (tests/spark_jvm.py); its log is beside it"
    assert f"-XX:SharedArchiveFile={archive}" in jvm_archive.java_options()  # the suite turns it on
    warm = classes_loaded(tmp_path / "warm", **{jvm_archive.ENV: "on"})
    # Spark's classes (the application loader) and Iceberg's (spark.jars: Spark's own loader) alike.
    assert f"{SESSION} source: shared objects file (top)" in warm
    assert f"{ICEBERG} source: shared objects file (top)" in warm
    cold = classes_loaded(tmp_path / "cold", **{jvm_archive.ENV: "off"})
    assert f"{SESSION} source: file:" in cold and f"{ICEBERG} source: file:" in cold


def test_an_archive_that_does_not_fit_is_ignored(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.jsa"
    garbage.write_bytes(b"not a class archive" * 1000)
    for archive in (garbage, tmp_path / "missing.jsa"):
        done = subprocess.run([jars.java(), f"-XX:SharedArchiveFile={archive}", *jvm_archive.QUIET.split(), "-version"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr


def test_a_stack_trains_only_when_asked_and_nothing_has_or_is_being(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "spark-key.jsa"
    monkeypatch.setattr(jvm_archive, "path", lambda: archive)
    started: list[str] = []
    monkeypatch.setattr(jvm_archive, "Training", lambda: started.append("training") or "training")
    monkeypatch.setenv(jvm_archive.ENV, "on")
    archive.with_suffix(".failed").write_text("training exited 1")
    assert jvm_archive.train_in_background() is None  # failed before: `sinklab jvm train` says why
    archive.with_suffix(".failed").unlink()
    archive.with_suffix(".training").write_text(str(os.getpid()))
    assert jvm_archive.train_in_background() is None  # another stack trains it now
    archive.with_suffix(".training").write_text("999999999")
    monkeypatch.delenv(jvm_archive.ENV)  # off unless asked for: sinklab's default
    assert jvm_archive.train_in_background() is None
    monkeypatch.setenv(jvm_archive.ENV, "off")
    assert jvm_archive.train_in_background() is None
    monkeypatch.setenv(jvm_archive.ENV, "on")
    assert jvm_archive.train_in_background() == "training"  # a dead run's marker does not hold it back
    archive.write_bytes(b"trained")
    assert jvm_archive.train_in_background() is None
    assert jvm_archive.java_options() == f"-XX:SharedArchiveFile={archive} {jvm_archive.QUIET}"
    monkeypatch.delenv(jvm_archive.ENV)
    assert jvm_archive.java_options() == ""
    assert started == ["training"]


def test_the_key_changes_when_a_jar_is_installed_again(tmp_path: Path) -> None:
    jar = tmp_path / "spark-core.jar"
    jar.write_bytes(b"PK" * 100)
    before = jvm_archive.key("openjdk 17", [jar])
    assert jvm_archive.key("openjdk 17", [jar]) == before
    # Same path, same size, a new modification time: what a venv installed again looks like to the JVM.
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 5_000_000_000))
    assert jvm_archive.key("openjdk 17", [jar]) != before
    assert jvm_archive.key("openjdk 21", [jar]) != jvm_archive.key("openjdk 17", [jar])


def test_training_keeps_the_archives_used_last_and_deletes_the_rest(tmp_path: Path) -> None:
    now = 1_800_000_000
    archives = [tmp_path / f"spark-{n}.jsa" for n in range(5)]
    for age, archive in enumerate(archives):  # spark-0 used last, spark-4 longest ago
        archive.write_bytes(b"archive")
        archive.with_suffix(".log").write_text("trained")
        os.utime(archive, (now - age * 3600, now - age * 3600))
    fresh = tmp_path / "spark-new.jsa"
    fresh.write_bytes(b"archive")
    os.utime(fresh, (now - 10 * 3600, now - 10 * 3600))  # the one kept however old
    deleted = jvm_archive.prune(fresh)
    assert deleted == archives[jvm_archive.KEEP_OTHERS:]
    assert sorted(tmp_path.glob("*.jsa")) == sorted([fresh, *archives[:jvm_archive.KEEP_OTHERS]])
    assert not any(a.with_suffix(".log").exists() for a in deleted)


def test_a_driver_start_marks_the_archive_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "spark-key.jsa"
    monkeypatch.setattr(jvm_archive, "path", lambda: archive)
    monkeypatch.setenv(jvm_archive.ENV, "on")
    assert jvm_archive.java_options() == ""  # none yet
    archive.write_bytes(b"archive")
    os.utime(archive, (1_000_000_000, 1_000_000_000))
    assert f"-XX:SharedArchiveFile={archive}" in jvm_archive.java_options()
    assert archive.stat().st_mtime > 1_000_000_000
