"""A class-data-sharing archive for the Spark drivers sinklab starts: a warm first cycle.

A fresh driver JVM spends most of a sink's first cycle loading and verifying the classes of Spark,
Iceberg, Parquet and Kafka. The JVM can map those classes from an archive instead (AppCDS,
``-XX:SharedArchiveFile``), dumped once by a training run (``-XX:ArchiveClassesAtExit``) that does
what a cycle does: Spark's Kafka source reads a topic, rows go through a Python UDF, Iceberg
appends them through the REST catalog, the table is read back. Figures in bench/README.md.

One archive per installation: the JVM ties it to its own build and to the classpath's paths, sizes
and modification times, so the key covers all of them, and a driver with an archive that does not
match (another Java, new jars, the same jars installed again) ignores it silently. Written under a
name of its own and moved in place only once the training JVM exited cleanly: a truncated archive
crashes every JVM that maps it (SIGBUS).

Off unless ``SINKLAB_JVM_ARCHIVE=on`` (see ``ENV``). Then ``sinklab jvm train`` trains it, or a stack
whose Spark starts without one trains it in the background, once (a failed training is not repeated
until ``sinklab jvm train``). The test suite turns it on (tests/spark_jvm.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from sinklab.stack import jars
from sinklab.stack.process import pid_alive, stop_leader_first

log = logging.getLogger(__name__)

# "on": drivers map the archive, and a stack trains it when missing. Off by default: it takes 2.5–3 s
# off a fresh driver's first cycle, and the sink's drains keep their pace, but Spark's own jobs in a
# young driver ran up to 28% slower with it in bench/ingest.py (bench/README.md).
ENV = "SINKLAB_JVM_ARCHIVE"
# The archive's own chatter (a mismatch, a dump's progress) stays off a notebook's output.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
TRAIN_TIMEOUT_S = 600
# Archives of other installations (other venvs, this one before it was installed again) kept beside
# this one's: 195 MB each, and a CI machine that installs afresh would otherwise gain one per run.
KEEP_OTHERS = 2


def enabled() -> bool:
    return os.environ.get(ENV, "").lower() in ("on", "1", "true")


@functools.cache
def _java_build() -> str:
    # A process asks at each Spark start, twice (the options, then whether to train): once is enough.
    return subprocess.run([jars.java(), "-version"], capture_output=True, text=True, check=True).stderr


def path() -> Path:
    """Where this installation's archive is: keyed by the Java build and the driver's jars."""
    from pyspark import __file__ as pyspark_init

    version = _java_build()
    driver = sorted((Path(pyspark_init).parent / "jars").glob("*.jar"))
    # The jars a default session adds (spark.spark_jars): the archive holds their classes too.
    extra = [j for part in (jars.SPARK_ICEBERG, jars.SPARK_KAFKA, jars.SPARK_AVRO) for j in jars.jars(part)]
    return jars.cache_dir().parent / "jvm" / f"spark-{key(version, driver + extra)}.jsa"


def key(java_build: str, classpath: list[Path]) -> str:
    # The JVM checks each jar's size and modification time against the archive's: a venv installed
    # again at the same path keeps both paths and sizes, and its drivers silently ignored the old
    # archive (class+load showed Spark's classes read from the jars) while its key still matched.
    entries = (f"{p}:{st.st_size}:{st.st_mtime_ns}" for p, st in ((p, p.stat()) for p in classpath))
    return hashlib.sha256("\n".join([java_build, *entries]).encode()).hexdigest()[:16]


def java_options() -> str:
    """The driver's JVM options for the archive, or "" when there is none (yet)."""
    if not enabled():
        return ""
    try:
        archive = path()
    except Exception:  # noqa: BLE001 - no Java or jars: Spark itself will say so
        return ""
    try:
        os.utime(archive)  # its last use, for prune()
    except OSError:  # none yet, or not this user's: the JVM reads it all the same
        if not archive.exists():
            return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def prune(keep: Path) -> list[Path]:
    """Delete the archives beside ``keep`` but the ``KEEP_OTHERS`` used last; returns what it deleted.
    A driver that maps one of them still reads it: a file that is unlinked lives on while mapped."""
    def last_use(archive: Path) -> float:
        try:
            return archive.stat().st_mtime
        except OSError:  # deleted meanwhile, by another installation's training
            return 0.0

    others = sorted((a for a in keep.parent.glob("spark-*.jsa") if a != keep), key=last_use, reverse=True)
    for old in others[KEEP_OTHERS:]:
        for suffix in (".jsa", ".log", ".failed"):
            old.with_suffix(suffix).unlink(missing_ok=True)
    return others[KEEP_OTHERS:]


def _failed_marker(archive: Path) -> Path:
    return archive.with_suffix(".failed")


def _training_marker(archive: Path) -> Path:
    """Holds the PID of the training run under way, so that two stacks do not both train."""
    return archive.with_suffix(".training")


def _training_now(archive: Path) -> bool:
    try:
        return pid_alive(int(_training_marker(archive).read_text()))
    except (OSError, ValueError):
        return False


def train(timeout: float = TRAIN_TIMEOUT_S) -> Path:
    """Train the archive now (32–34 s on 2 cores, measured); returns its path. Raises when training fails."""
    proc, archive, partial = _start()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stop_leader_first(proc.pid, grace=30)
    return _finish(proc, archive, partial)


def _start(nice: int = 0) -> tuple[subprocess.Popen[bytes], Path, Path]:
    archive = path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    for stale in archive.parent.glob("*.partial"):  # a training run that was itself killed
        if not pid_alive(int(stale.name.split(".")[-2])):
            stale.unlink(missing_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    env = {**os.environ, ENV: "off",
           "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
    output = open(archive.with_suffix(".log"), "wb")  # noqa: SIM115 - the process holds it
    proc = subprocess.Popen([sys.executable, "-m", "sinklab.stack.jvm_training", str(partial)], env=env,
                            stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)
    output.close()
    _training_marker(archive).write_text(str(proc.pid))
    return proc, archive, partial


def _finish(proc: subprocess.Popen[bytes], archive: Path, partial: Path) -> Path:
    _training_marker(archive).unlink(missing_ok=True)
    if proc.returncode == 0 and partial.exists():
        partial.replace(archive)
        _failed_marker(archive).unlink(missing_ok=True)
        for old in prune(archive):
            log.info("deleted %s, an archive not used lately", old)
        return archive
    partial.unlink(missing_ok=True)
    output = archive.with_suffix(".log")
    _failed_marker(archive).write_text(f"training exited {proc.returncode}; see {output}\n")
    raise RuntimeError(f"training the Spark driver's class archive failed (exit {proc.returncode}): "
                       f"{output.read_text(errors='replace')[-2000:] if output.exists() else ''}")


class Training:
    """A training run in the background, at low priority; ``stop()`` ends it (its stack with it) if it
    has not finished, and keeps the archive if it has."""

    def __init__(self) -> None:
        self.proc, self.archive, self.partial = _start(nice=10)
        self.finished = False

    def done(self) -> bool:
        if self.finished:
            return True
        if self.proc.poll() is None:
            return False
        self.finished = True
        try:
            _finish(self.proc, self.archive, self.partial)
        except RuntimeError as exc:
            # Spark runs as before, without the archive; the marker keeps stacks from training again.
            log.warning("%s", exc)
        return True

    def stop(self) -> None:
        if not self.done():
            # Its own SIGTERM handler stops its stack; then its group goes.
            stop_leader_first(self.proc.pid, grace=30)
            self.finished = True
            self.partial.unlink(missing_ok=True)
            _training_marker(self.archive).unlink(missing_ok=True)


def train_in_background() -> Training | None:
    """A background training run when this installation has no archive and none failed before."""
    if not enabled():
        return None
    try:
        archive = path()
    except Exception:  # noqa: BLE001 - no Java or jars: nothing to train with
        return None
    if archive.exists() or _failed_marker(archive).exists() or _training_now(archive):
        return None
    return Training()
