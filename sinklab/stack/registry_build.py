"""Apicurio Registry, built into a runnable jar from its Maven coordinate (the schema registry's JVM part).

Apicurio Registry is a Quarkus application, and Maven Central holds only its plain jar
(``io.apicurio:apicurio-registry-app``), not the runnable form Quarkus makes at build time. This module
makes that form on the user's machine the way Quarkus's own build does: Quarkus's bootstrap (from
Central, through ``jars.py``) resolves the application's dependencies with Maven's resolver into
sinklab's cache and runs the augmentation, which writes ``apicurio-registry-runner.jar`` and its
``lib/``. Done once per version (about a minute, ~130 MB); later stacks start the jar directly.

Version 2.4.2.Final is the newest whose dependencies Central serves (2.6.x needs
``apicurio-registry-utils-kafka`` 2.6.x, which is not there; 3.x needs Java 21). Two of its
dependencies are not on Central under the names its POMs use; the build puts fix-ups into its local
Maven repository (``FIXUPS``): the everit JSON-schema library, published on Central as
``com.github.erosb:everit-json-schema`` (a relocation POM), and the deployment half of
``apicurio-common-app-components-config-index`` 0.1.18, which Central has only as 0.1.10 (its build
step, which indexes configuration properties, is the same; the jar is copied from the resolved 0.1.10).

Run as ``python -m sinklab.stack.registry_build`` (what ``runner_jar`` does): the py4j JVM of the
build logs Maven's progress to the build log, not to the caller's console.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sinklab.stack import jars
from sinklab.stack.jars import APICURIO_VERSION

APP = ("io.apicurio", "apicurio-registry-app", APICURIO_VERSION)
RUNNER = "apicurio-registry-runner.jar"
PART = "schema-registry"  # its name beside the jar parts (`sinklab jars fetch`) and its folder in an export
_CONFIG_INDEX = "io/apicurio/apicurio-common-app-components-config-index-deployment"
_EVERIT = "com/github/everit-org/json-schema/org.everit.json.schema/1.14.2/org.everit.json.schema-1.14.2.pom"
FIXUPS: dict[str, str] = {
    _EVERIT: """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>com.github.everit-org.json-schema</groupId><artifactId>org.everit.json.schema</artifactId><version>1.14.2</version>
<distributionManagement><relocation><groupId>com.github.erosb</groupId><artifactId>everit-json-schema</artifactId>
</relocation></distributionManagement></project>
""",
    f"{_CONFIG_INDEX}/0.1.18.Final/apicurio-common-app-components-config-index-deployment-0.1.18.Final.pom":
    """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>io.apicurio</groupId><artifactId>apicurio-common-app-components-config-index-deployment</artifactId>
<version>0.1.18.Final</version>
<distributionManagement><relocation><version>0.1.10.Final</version></relocation>
</distributionManagement></project>
""",
}
# The released deployment jar whose copy stands in for 0.1.18's (see the module docstring).
_CONFIG_INDEX_JAR = ("io.apicurio:apicurio-common-app-components-config-index-deployment:jar:0.1.10.Final",
                     f"{_CONFIG_INDEX}/0.1.18.Final/apicurio-common-app-components-config-index-deployment-0.1.18.Final.jar")


def build_dir() -> Path:
    return jars.cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"


def runner_jar() -> Path:
    """The runnable registry jar: the user's exported copy (``SINKLAB_JARS_DIR``), else the cached
    build, else built now (the failure names what was missing). One build at a time per cache: a
    second process waits for the first's and uses it."""
    user_dir = os.environ.get(jars.JARS_DIR_ENV)
    if user_dir:
        runner = Path(user_dir).expanduser() / PART / RUNNER
        if not runner.is_file():
            raise jars.JarsNotFound(f"{jars.JARS_DIR_ENV}={user_dir}: no {PART}/{RUNNER} for Apicurio Registry "
                                    f"{APICURIO_VERSION} (`sinklab jars export DIR` on a connected machine writes it)")
        return runner
    out = build_dir()
    if _built(out):
        return out / RUNNER
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if _built(out):
            return out / RUNNER
        _build_in_subprocess(out)
    return out / RUNNER


def ready() -> bool:
    """Whether the runnable registry is here (the user's exported copy or the cached build); nothing is built."""
    user_dir = os.environ.get(jars.JARS_DIR_ENV)
    if user_dir:
        return (Path(user_dir).expanduser() / PART / RUNNER).is_file()
    return _built(build_dir())


def export(dest: Path) -> Path:
    """Copy the built registry (building it first if needed) to ``dest/schema-registry/``, beside the
    parts ``jars.export`` writes: what ``runner_jar`` finds under ``SINKLAB_JARS_DIR``."""
    built = runner_jar().parent
    target = dest / PART
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(built, target, ignore=shutil.ignore_patterns("build.log", "complete"))
    return target


def _built(out: Path) -> bool:
    return (out / "complete").is_file() and (out / RUNNER).is_file()


def _build_in_subprocess(out: Path) -> None:
    jars.jars(jars.QUARKUS_BOOTSTRAP)  # resolved here, so that a failure names the coordinate
    out.mkdir(parents=True, exist_ok=True)
    (out / "complete").unlink(missing_ok=True)
    log = out / "build.log"
    with open(log, "wb") as fh:
        proc = subprocess.run([sys.executable, "-m", "sinklab.stack.registry_build", str(out)], stdout=fh,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1800)
    if proc.returncode != 0 or not (out / RUNNER).is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise jars.JarsNotFound(f"could not build Apicurio Registry {APICURIO_VERSION} "
                                f"({':'.join(APP)}) from {os.environ.get(jars.REPO_ENV) or jars.MAVEN_CENTRAL}; "
                                f"log {log}:\n{tail}")
    (out / "complete").write_text(APICURIO_VERSION + "\n")


def build(out: Path) -> None:
    """Resolve the registry's application model and run Quarkus's augmentation into ``out``."""
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    port = launch_gateway(classpath=jars.classpath(jars.QUARKUS_BOOTSTRAP), javaopts=["-Xmx1g"], die_on_exit=True,
                          redirect_stdout=sys.stdout, redirect_stderr=sys.stderr)
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    try:
        _augment(gateway, out)
    finally:
        gateway.shutdown()


def _augment(gateway: Any, out: Path) -> None:
    jvm = gateway.jvm
    q = jvm.io.quarkus.bootstrap
    local_repo = jars.cache_dir() / "m2"
    # Written into the local repository itself: files there that Maven did not download (no
    # _remote.repositories record) count as installed locally, so Maven never asks a server for them.
    for rel, text in FIXUPS.items():
        (local_repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (local_repo / rel).write_text(text)
    builder = (q.resolver.maven.MavenArtifactResolver.builder().setLocalRepository(str(local_repo))
               .setWorkspaceDiscovery(False).setArtifactTransferLogging(False))
    if os.environ.get(jars.REPO_ENV):
        remote = jvm.org.eclipse.aether.repository.RemoteRepository.Builder(
            "central", "default", os.environ[jars.REPO_ENV]).build()
        builder = builder.setRemoteRepositories(jvm.java.util.List.of(remote))
    mvn = builder.build()
    coords, target_jar = _CONFIG_INDEX_JAR
    resolved = mvn.resolve(jvm.org.eclipse.aether.artifact.DefaultArtifact(coords)).getArtifact().getFile()
    shutil.copyfile(str(resolved.getPath()), local_repo / target_jar)

    app = jvm.io.quarkus.maven.dependency.ArtifactCoords.jar(*APP)
    model = q.resolver.BootstrapAppModelResolver(mvn).resolveModel(app)
    app_jar = model.getAppArtifact().getResolvedPaths().getSinglePath()
    target = jvm.java.nio.file.Paths.get(str(out), gateway.new_array(jvm.java.lang.String, 0))
    curated = (q.app.QuarkusBootstrap.builder().setApplicationRoot(app_jar).setExistingModel(model)
               .setMavenArtifactResolver(mvn).setTargetDirectory(target).setMode(q.app.QuarkusBootstrap.Mode.PROD)
               .setLocalProjectDiscovery(False).setIsolateDeployment(True).setBaseName("apicurio-registry")
               .build().bootstrap())
    try:
        result = curated.createAugmentor().createProductionApplication()
        print(f"built {result.getJar().getPath()}", flush=True)
    finally:
        curated.close()


if __name__ == "__main__":
    build(Path(sys.argv[1]))
