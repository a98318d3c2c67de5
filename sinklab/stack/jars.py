"""Maven coordinates -> local jars, in one place.

Every JVM part of the stack (the Kafka broker, Apache's Iceberg REST server, Iceberg for Spark) comes
from Maven Central by pinned coordinate. They are resolved with the Apache Ivy that PySpark ships
(``pyspark/jars/ivy-*.jar``, the resolver behind ``spark.jars.packages``), so no ``mvn`` is needed.
The first resolution writes each part's classpath into the cache; later runs read it back and never
touch the network. An air-gapped machine points ``SINKLAB_JARS_DIR`` at a folder with one subfolder
of jars per part (``sinklab jars export DIR`` on a connected machine writes one).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from sinklab.exceptions import JarsNotFound

ICEBERG_VERSION = "1.12.0"
KAFKA_VERSION = "4.3.1"
APICURIO_VERSION = "2.4.2.Final"  # the stack's schema registry (registry_build.py) and its Connect converter
SPARK_LINE = "4.1"  # Iceberg publishes a Spark runtime per Spark minor line; none yet for 4.2/4.3
SPARK_VERSION = "4.1.1"  # pyspark's own version: the Kafka source and Avro functions are pinned to it
SCALA_VERSION = "2.13"  # pyspark 4 wheels are built for Scala 2.13
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"

JARS_DIR_ENV = "SINKLAB_JARS_DIR"  # a user's own jars, one subfolder per part (air-gapped machines)
CACHE_ENV = "SINKLAB_JARS_CACHE"  # where resolved jars and classpaths live
REPO_ENV = "SINKLAB_MAVEN_REPO"  # a Maven mirror instead of Central


@dataclass(frozen=True)
class Part:
    """A JVM part of the stack: its coordinates and whether their dependencies come along."""

    name: str
    coordinates: tuple[str, ...]
    transitive: bool = True
    # "org:module" (module may be "*") left out of the transitive closure: what a part does not run.
    excludes: tuple[str, ...] = ()


# The broker: kafka.Kafka and its dependencies (Scala, kafka-clients, the KRaft modules, log4j2), and the
# slf4j binding Kafka's own distribution adds so that the broker's log reaches log4j2.
KAFKA = Part("kafka", (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
                       "org.apache.logging.log4j:log4j-slf4j-impl:2.24.3"))
# Apache's REST catalog server, the one the apache/iceberg-rest-fixture image runs. Up to 1.10 Central had
# it as one shaded jar; from 1.11 only its classes are published (iceberg-open-api's test fixtures, the
# servlet and adapter in iceberg-core's tests jar), so its classpath is assembled as its build does:
# iceberg-core with the JDBC catalog on SQLite, Jetty 12.1 (ee10 servlets, Jetty's compression handler),
# Hadoop's Configuration (the shaded client pair), S3FileIO for S3 warehouses, and log4j2 behind slf4j 2.
# 1.12 publishes neither (no iceberg-open-api 1.12.0 on Central, no iceberg-core 1.12.0 tests jar; checked
# 2026-11-25), so the server stays at 1.11.0's classes: clients at 1.12 speak the same REST protocol to it.
ICEBERG_REST_VERSION = "1.11.0"
JETTY_VERSION = "12.1.14"
ICEBERG_REST = Part("iceberg-rest", (
    f"org.apache.iceberg:iceberg-open-api:{ICEBERG_REST_VERSION}:test-fixtures",
    f"org.apache.iceberg:iceberg-core:{ICEBERG_REST_VERSION}:tests",
    f"org.apache.iceberg:iceberg-core:{ICEBERG_REST_VERSION}",
    f"org.apache.iceberg:iceberg-aws:{ICEBERG_REST_VERSION}",
    f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_REST_VERSION}",
    f"org.eclipse.jetty:jetty-server:{JETTY_VERSION}",
    f"org.eclipse.jetty.ee10:jetty-ee10-servlet:{JETTY_VERSION}",
    f"org.eclipse.jetty.compression:jetty-compression-gzip:{JETTY_VERSION}",
    f"org.eclipse.jetty.compression:jetty-compression-server:{JETTY_VERSION}",
    "org.xerial:sqlite-jdbc:3.54.1.0",
    "org.apache.hadoop:hadoop-client-api:3.4.1",
    "org.apache.hadoop:hadoop-client-runtime:3.4.1",
    "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
    "org.apache.logging.log4j:log4j-core:2.24.3",
), excludes=(
    # iceberg-aws's SDK modules are the bundle's, shaded; the plain SDK would be a second copy.
    "software.amazon.awssdk:*",
    "org.slf4j:slf4j-log4j12", "org.slf4j:slf4j-reload4j", "ch.qos.reload4j:*",
))
# Iceberg for Spark; both jars are shaded bundles, so no dependencies come along.
SPARK_ICEBERG = Part("spark-iceberg",
                     (f"org.apache.iceberg:iceberg-spark-runtime-{SPARK_LINE}_{SCALA_VERSION}:{ICEBERG_VERSION}",),
                     transitive=False)
# Iceberg's S3FileIO for Spark (AWS SDK v2, shaded).
SPARK_S3 = Part("spark-s3", (f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_VERSION}",), transitive=False)
# Spark's Kafka source at pyspark's version (Central has its token provider and spark-avro at 4.1.1, no later 4.1).
# Listed without their dependencies: the rest of what they need (lz4, snappy, zstd-jni, slf4j) is in pyspark's
# jars already, and a second copy at another version on the classpath is what breaks a JVM at run time.
SPARK_KAFKA = Part("spark-kafka", (f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_VERSION}:{SPARK_VERSION}",
                                   f"org.apache.spark:spark-token-provider-kafka-0-10_{SCALA_VERSION}:{SPARK_VERSION}",
                                   "org.apache.kafka:kafka-clients:3.9.1",
                                   "org.apache.commons:commons-pool2:2.12.1"), transitive=False)

# The peer of bench/ingest.py: Apache Iceberg's own Kafka Connect sink in a standalone Connect worker.
# Its runtime zip is not on Maven Central, so its classpath is assembled here: the sink (which brings
# -events, iceberg-core/-data, Avro, Jackson), iceberg-parquet and iceberg-orc (compile-only dependencies
# of iceberg-data, so they do not come along), Kafka Connect's runtime at the broker's version, Hadoop's
# shaded client (Iceberg's Parquet writer needs org.apache.hadoop.conf.Configuration; the shaded pair
# brings no Jetty or Jersey to clash with Connect's), and log4j2 behind slf4j 2 (the version Iceberg
# pulls in, for which log4j-slf4j-impl is no binding). On demand: not in PARTS, so `make setup` (the demo)
# never downloads it; what runs Apache's sink (the tests, notebook 11, the bench) or `sinklab jars fetch
# iceberg-connect` / `--all` (make workshop-prep) does.
JAVA_SINK = Part("iceberg-connect", (
    f"org.apache.iceberg:iceberg-kafka-connect:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-kafka-connect-events:{ICEBERG_VERSION}",
    # Iceberg's own transforms (KafkaMetadataTransform, DebeziumTransform, CopyValue, DmsTransform...), which
    # tests/test_connect_transforms.py runs through this sink to compare with sinklab's.
    f"org.apache.iceberg:iceberg-kafka-connect-transforms:{ICEBERG_VERSION}",
    # Apicurio Registry's AvroConverter (Red Hat's and Debezium's stacks), at the stack's registry's version, which
    # tests/test_connect_converters.py runs through this sink to compare with sinklab's reading of its frame.
    # Its modules named at that version too: their POMs leave versions to a parent Ivy reads as 2.3.1.
    *(f"io.apicurio:apicurio-registry-{m}:{APICURIO_VERSION}" for m in ("utils-converter", "serdes-avro-serde",
                                                                           "client")),
    f"org.apache.iceberg:iceberg-core:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-data:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-parquet:{ICEBERG_VERSION}",
    f"org.apache.iceberg:iceberg-orc:{ICEBERG_VERSION}",
    f"org.apache.kafka:connect-runtime:{KAFKA_VERSION}",
    f"org.apache.kafka:connect-json:{KAFKA_VERSION}",
    "org.apache.hadoop:hadoop-client-api:3.4.1",
    "org.apache.hadoop:hadoop-client-runtime:3.4.1",
    "org.apache.logging.log4j:log4j-slf4j2-impl:2.24.3",
    "org.apache.logging.log4j:log4j-core:2.24.3",
), excludes=(
    # (ORC stays, iceberg-orc with it, though the sink writes Parquet: from 1.11 iceberg-data registers
    # every file format's readers and writers when it loads, and fails without ORC's classes.)
    # Logging bindings other than log4j2's, which would compete for slf4j.
    "org.slf4j:slf4j-log4j12", "org.slf4j:slf4j-reload4j", "ch.qos.reload4j:*",
    # Apicurio's JSON Schema serde, which its converter jar brings along and the AvroConverter never loads; its
    # validator (everit) is on JitPack, not Central.
    "io.apicurio:apicurio-registry-serdes-jsonschema-serde", "com.github.everit-org.json-schema:*",
    "org.projectlombok:*",  # compile-time only, though Apicurio's POM says compile scope
))
# Quarkus's bootstrap, at the Quarkus version Apicurio Registry 2.4.2 is built on: it resolves the registry
# with Maven's resolver and makes its runnable jar (registry_build.py), once, when a stack first starts one.
QUARKUS_BOOTSTRAP = Part("quarkus-bootstrap", ("io.quarkus:quarkus-bootstrap-core:2.16.4.Final",
                                               "io.quarkus:quarkus-bootstrap-maven-resolver:2.16.4.Final"))
# Spark's Avro functions (from_avro) for Avro converters, at pyspark's own version; pyspark's jars hold Avro.
SPARK_AVRO = Part("spark-avro", (f"org.apache.spark:spark-avro_{SCALA_VERSION}:{SPARK_VERSION}",), transitive=False)
PARTS = {p.name: p for p in (KAFKA, ICEBERG_REST, SPARK_ICEBERG, SPARK_S3, SPARK_KAFKA, SPARK_AVRO)}
# Parts fetched only on demand, by name (`sinklab jars fetch <part>`, `jars(<name>)`).
BENCH_PARTS = {p.name: p for p in (JAVA_SINK, QUARKUS_BOOTSTRAP)}


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sinklab" / "jars"


def ivy_jar() -> Path:
    from importlib.util import find_spec

    spec = find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarsNotFound("pyspark is not installed: sinklab resolves Maven coordinates with the Ivy it ships")
    for location in spec.submodule_search_locations:
        found = sorted((Path(location) / "jars").glob("ivy-*.jar"))
        if found:
            return found[-1]
    raise JarsNotFound(f"no ivy-*.jar in pyspark's jars ({list(spec.submodule_search_locations)})")


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home) / "bin" / "java" if home else None
    if candidate is not None and candidate.exists():
        return str(candidate)
    found = shutil.which("java")
    if not found:
        raise JarsNotFound("java not found: sinklab's JVM parts need Java 17+ on PATH or JAVA_HOME")
    return found


def jars(part: Part | str) -> list[Path]:
    """The jars of ``part``: the user's folder, else the cache, else resolved now (and cached)."""
    part = _part(part)
    user_dir = os.environ.get(JARS_DIR_ENV)
    if user_dir:
        return _user_jars(Path(user_dir).expanduser(), part)
    listing = _listing(part)
    cached = _read_listing(listing)
    if cached is not None:
        return cached
    return resolve(part)


def cached(part: Part | str) -> list[Path] | None:
    """The jars of ``part`` if this machine has them (the user's folder or the cache), else None; nothing is
    resolved (``sinklab doctor`` asks)."""
    part = _part(part)
    user_dir = os.environ.get(JARS_DIR_ENV)
    if user_dir:
        try:
            return _user_jars(Path(user_dir).expanduser(), part)
        except JarsNotFound:
            return None
    return _read_listing(_listing(part))


def fetch(parts: list[Part], workers: int = 3) -> Iterator[tuple[Part, list[Path], float]]:
    """Each part's jars with the seconds since the fetch began, as each part is ready. Ivy downloads one
    artifact after another, so parts resolve side by side; their Ivy processes share the cache, which
    they lock per artifact."""
    started = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        futures = {pool.submit(jars, part): part for part in parts}
        for future in as_completed(futures):
            yield futures[future], future.result(), time.monotonic() - started


def classpath(*parts: Part | str) -> str:
    return os.pathsep.join(str(j) for part in parts for j in jars(part))


def resolve(part: Part) -> list[Path]:
    """Resolve ``part`` with Ivy into the cache; the listing written last marks it complete."""
    cache = cache_dir()
    work = cache / "ivy-work" / part.name
    work.mkdir(parents=True, exist_ok=True)
    settings = work / "ivysettings.xml"
    settings.write_text(_settings_xml(cache / "ivy", os.environ.get(REPO_ENV) or MAVEN_CENTRAL))
    module = work / "ivy.xml"
    module.write_text(_module_xml(part))
    out = work / "classpath.txt"
    out.unlink(missing_ok=True)
    argv = [java(), "-cp", str(ivy_jar()), "org.apache.ivy.Main", "-settings", str(settings), "-ivy", str(module),
            "-confs", "default", "-cachepath", str(out)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:
        raise JarsNotFound(f"resolving {', '.join(part.coordinates)} took over 15 minutes") from exc
    if proc.returncode != 0 or not out.exists():
        raise JarsNotFound(_failure(part, proc.stdout + proc.stderr))
    found = [Path(p) for p in out.read_text().strip().split(os.pathsep) if p]
    missing = [p for p in found if not p.is_file()]
    if not found or missing:
        raise JarsNotFound(_failure(part, proc.stdout + proc.stderr))
    listing = _listing(part)
    listing.parent.mkdir(parents=True, exist_ok=True)
    tmp = listing.with_suffix(".tmp")
    tmp.write_text("\n".join(str(p) for p in found) + "\n")
    tmp.replace(listing)
    return found


def export(dest: Path, parts: list[Part] | None = None) -> Path:
    """Copy each part's jars into ``dest/<part>/``: the folder ``SINKLAB_JARS_DIR`` takes."""
    for part in parts or list(PARTS.values()):
        target = dest / part.name
        target.mkdir(parents=True, exist_ok=True)
        for jar in jars(part):
            shutil.copy2(jar, target / jar.name)
    return dest


def _part(part: Part | str) -> Part:
    return (PARTS | BENCH_PARTS)[part] if isinstance(part, str) else part


def _listing(part: Part) -> Path:
    # Named by the coordinates: a version bump resolves again instead of reusing old jars.
    text = f"{part.transitive}:{','.join(part.coordinates)}"
    if part.excludes:  # only then, so that the listings of the parts without exclusions keep their names
        text += f":-{','.join(part.excludes)}"
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    return cache_dir() / "classpaths" / f"{part.name}-{key}.txt"


def _read_listing(path: Path) -> list[Path] | None:
    if not path.is_file():
        return None
    found = [Path(line) for line in path.read_text().splitlines() if line.strip()]
    return found if found and all(p.is_file() for p in found) else None


def _user_jars(folder: Path, part: Part) -> list[Path]:
    sub = folder / part.name
    found = sorted(sub.glob("*.jar"))
    for coordinate in part.coordinates:
        _, artifact, version, *classifier = coordinate.split(":")
        stem = "-".join([artifact, version, *classifier])
        if not any(j.name.startswith(stem) for j in found):
            raise JarsNotFound(f"{JARS_DIR_ENV}={folder}: {sub} has no {stem}*.jar for {coordinate} "
                               f"(`sinklab jars export DIR` on a connected machine writes this layout)")
    return found


def _failure(part: Part, output: str) -> str:
    # Ivy names what it could not find as "org#name;rev: not found" lines.
    unresolved = sorted(set(re.findall(r"::\s+([\w.\-]+#[\w.\-]+;[\w.\-]+): ([^\n]*)", output)))
    what = "; ".join(f"{dep.replace('#', ':').replace(';', ':')} ({why.strip()})" for dep, why in unresolved)
    tail = "\n".join(output.strip().splitlines()[-15:])
    return (f"could not fetch {', '.join(part.coordinates)} (sinklab's {part.name} jars) from "
            f"{os.environ.get(REPO_ENV) or MAVEN_CENTRAL}" + (f": unresolved {what}" if what else "")
            + f"\nOffline? Point {JARS_DIR_ENV} at a folder made by `sinklab jars export` on a connected machine."
            + f"\nIvy said:\n{tail}")


def _settings_xml(ivy_cache: Path, repo: str) -> str:
    return f"""<ivysettings>
  <settings defaultResolver="central"/>
  <caches defaultCacheDir={quoteattr(str(ivy_cache))} useOrigin="false" lockStrategy="artifact-lock-nio"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root={quoteattr(repo)}/>
  </resolvers>
</ivysettings>
"""


def _module_xml(part: Part) -> str:
    # "org:name:rev:classifier" names one more artifact of a module (its tests jar, say). Ivy keeps one
    # dependency per module, so a module's artifacts are listed together under it.
    modules: dict[tuple[str, str, str], list[str | None]] = {}
    for coordinate in part.coordinates:
        org, name, rev, *classifier = coordinate.split(":")
        modules.setdefault((org, name, rev), []).append(classifier[0] if classifier else None)
    deps = []
    for (org, name, rev), classifiers in modules.items():
        attrs = (f'org={quoteattr(org)} name={quoteattr(name)} rev={quoteattr(rev)} '
                 f'transitive="{str(part.transitive).lower()}" conf="default->default"')
        if classifiers == [None]:
            deps.append(f'    <dependency {attrs}/>')
            continue
        artifacts = "".join(f'\n      <artifact name={quoteattr(name)} type="jar" ext="jar"'
                            + (f' m:classifier={quoteattr(c)}' if c else "") + "/>" for c in classifiers)
        deps.append(f'    <dependency {attrs}>{artifacts}\n    </dependency>')
    for pattern in part.excludes:
        org, name = pattern.split(":")
        deps.append(f'    <exclude org={quoteattr(org)} module={quoteattr(name)}/>')
    body = "\n".join(deps)
    return f"""<ivy-module version="2.0" xmlns:m="http://ant.apache.org/ivy/maven">
  <info organisation="sinklab" module={quoteattr(part.name)}/>
  <configurations><conf name="default"/></configurations>
  <dependencies>
{body}
  </dependencies>
</ivy-module>
"""
