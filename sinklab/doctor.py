"""`sinklab doctor`: whether this machine runs sinklab and its tutorials, each problem with its fix.

Each check returns one ``Finding``: ``ok``, ``warn`` (a part some feature needs is missing, or will be
downloaded at first use) or ``fail`` (something the demo itself needs). Nothing is installed, resolved or
built here; the fixes say what would.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Literal

from sinklab.exceptions import JarsNotFound
from sinklab.stack import jars, registry_build

Level = Literal["ok", "warn", "fail"]
PYTHONS = ((3, 11), (3, 13))  # the oldest and newest minor sinklab is tested on (pyproject.toml, Makefile)
JAVA_MIN = 17  # Spark 4.1's
NOTEBOOK_MODULES = ("plotly", "ipywidgets", "papermill", "jupyterlab", "kaleido")
LAB_PORT = 8888  # JupyterLab's own default (make lab)
HEADROOM_MB = 1024  # a demo's and a tutorial's work directories, Spark's scratch, logs
# Megabytes each part takes in the cache, measured by `sinklab jars fetch` (2026-11-29): what a disk
# needs before they are downloaded, and what a room's network carries.
PART_MB = {"kafka": 45, "iceberg-rest": 151, "spark-iceberg": 48, "spark-s3": 69, "spark-kafka": 10,
           "spark-avro": 1, "iceberg-connect": 118, "quarkus-bootstrap": 10, registry_build.PART: 136}
# When a part not yet here is fetched, if nobody fetches it first.
FETCHED_AT = {"iceberg-connect": "when Apache's sink first runs: notebook 11",
              "quarkus-bootstrap": "to build the registry",
              registry_build.PART: "built, a minute, when a stack first starts one: notebook 10"}
FETCH_ALL = "sinklab jars fetch --all  (a clone: make workshop-prep); afterwards every tutorial runs offline"
STACK_START = "at the first stack start"


@dataclass(frozen=True)
class Finding:
    name: str
    level: Level
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def check_python(version: Sequence[int] | None = None) -> Finding:
    found = tuple((version or sys.version_info)[:3])
    text = ".".join(map(str, found))
    (lo_major, lo_minor), (hi_major, hi_minor) = PYTHONS
    span = f"{lo_major}.{lo_minor} to {hi_major}.{hi_minor}"
    if PYTHONS[0] <= found[:2] <= PYTHONS[1]:
        return Finding("python", "ok", f"{text} ({sys.executable}); sinklab runs on {span}")
    return Finding("python", "fail", f"{text}: sinklab runs on Python {span}",
                   f"install Python {hi_major}.{hi_minor} (or {span}) and make a virtualenv with it; a clone's make "
                   "finds python3, python3.13, python3.12 or python3.11 by itself")


def java_version(text: str) -> int | None:
    """The major version in ``java -version``'s output: 17 of ``"17.0.15"``, 8 of ``"1.8.0_292"``."""
    found = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def check_java() -> Finding:
    fix = (f"install a Java {JAVA_MIN} or newer (Debian/Ubuntu: apt-get install openjdk-{JAVA_MIN}-jre-headless; "
           "macOS: brew install openjdk@17) and put it on PATH or set JAVA_HOME")
    try:
        java = jars.java()
    except JarsNotFound:
        return Finding("java", "fail", "not found on PATH or in JAVA_HOME: Spark, the broker and the catalog need it",
                       fix)
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Finding("java", "fail", f"{java} does not run: {exc}", fix)
    major = java_version(out.stderr + out.stdout)
    if major is None or major < JAVA_MIN:
        return Finding("java", "fail", f"{java} is Java {major or 'of an unknown version'}; Spark 4.1 needs "
                                       f"{JAVA_MIN}+", fix)
    return Finding("java", "ok", f"{major} ({java})")


def check_notebooks(modules: Sequence[str] = NOTEBOOK_MODULES) -> Finding:
    missing = [m for m in modules if find_spec(m) is None]
    if missing:
        return Finding("notebooks", "warn", f"the notebooks extra is not installed ({', '.join(missing)} missing): "
                                            "the demo runs, the tutorials do not",
                       "pip install 'sinklab[notebooks]'  (a clone: make setup-notebooks, or make lab)")
    return Finding("notebooks", "ok", "the notebooks extra: JupyterLab, plotly, papermill")


def check_chromium() -> Finding:
    fix = ("apt-get install chromium (Debian/Ubuntu), or point BROWSER_PATH at any Chromium or Chrome; "
           "only figures' PNGs need it")
    if find_spec("kaleido") is None:
        return Finding("chromium", "warn", "not checked: figures' PNGs need the notebooks extra first",
                       "pip install 'sinklab[notebooks]', then this")
    from sinklab.viz.render import chromium

    found = chromium()
    if found is None:
        return Finding("chromium", "warn", "not found: figures show in JupyterLab, but executed notebooks and "
                                           "their HTML carry no PNG of them", fix)
    return Finding("chromium", "ok", f"{found} (figures' PNGs)")


def check_loopback() -> Finding:
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
    except OSError as exc:
        return Finding("loopback", "fail", f"cannot bind 127.0.0.1: {exc}; the embedded stack's servers listen there",
                       "enable the loopback interface (lo) or run outside a sandbox that forbids binding")
    return Finding("loopback", "ok", "127.0.0.1 binds (the embedded stack's servers take free ports there)")


def check_ports(ports: Sequence[int] = (LAB_PORT,)) -> Finding:
    taken = []
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    if taken:
        return Finding("ports", "warn", f"{', '.join(map(str, taken))} in use on 127.0.0.1 (JupyterLab's is "
                                        f"{LAB_PORT}): it then takes the next free port and prints its URL",
                       "stop the other JupyterLab (jupyter server list shows it) or open the URL `make lab` prints")
    return Finding("ports", "ok", f"{', '.join(map(str, ports))} free on 127.0.0.1")


def _missing_parts() -> list[str]:
    names = [n for n in (*jars.PARTS, *jars.BENCH_PARTS) if jars.cached(n) is None]
    return names + ([] if registry_build.ready() else [registry_build.PART])


def check_disk(path: Path | None = None, need_mb: int | None = None) -> Finding:
    path = path or jars.cache_dir()
    existing = next(p for p in (path, *path.parents) if p.exists())
    free_mb = shutil.disk_usage(existing).free // 2**20
    need_mb = need_mb if need_mb is not None else HEADROOM_MB + sum(PART_MB.get(n, 0) for n in _missing_parts())
    if free_mb < need_mb:
        return Finding("disk", "fail", f"{free_mb / 1024:.1f} GB free at {existing}; the jars still to fetch and the "
                                       f"work directories need {need_mb / 1024:.1f} GB",
                       f"free space there, or put the jar cache elsewhere: {jars.CACHE_ENV}=/a/larger/disk")
    return Finding("disk", "ok", f"{free_mb / 1024:.1f} GB free at {existing} (needs {need_mb / 1024:.1f} GB)")


def _reachable(url: str, timeout: float = 5.0) -> bool:
    import requests

    try:
        requests.head(url, timeout=timeout)
    except requests.RequestException:
        return False
    return True


def check_jars() -> Finding:
    missing = _missing_parts()
    if not missing:
        return Finding("jars", "ok", f"every part is here ({jars.cache_dir()}): every tutorial runs offline")
    here = [n for n in (*jars.PARTS, *jars.BENCH_PARTS, registry_build.PART) if n not in missing]
    repo = os.environ.get(jars.REPO_ENV) or jars.MAVEN_CENTRAL
    by_when: dict[str, list[str]] = {}
    for name in missing:
        by_when.setdefault(FETCHED_AT.get(name, STACK_START), []).append(name)
    whats = "; ".join(f"{', '.join(names)} ({when})" for when, names in by_when.items())
    total = sum(PART_MB.get(n, 0) for n in missing)
    detail = f"~{total} MB not here yet: {whats}" + (f". Here: {', '.join(here)}" if here else "")
    own = os.environ.get(jars.JARS_DIR_ENV)
    if own:
        return Finding("jars", "fail", f"{jars.JARS_DIR_ENV}={own} lacks {', '.join(missing)}",
                       "on a connected machine: sinklab jars fetch --all && sinklab jars export --all DIR; copy DIR")
    if not _reachable(repo):
        return Finding("jars", "fail", f"{detail}; and {repo} cannot be reached",
                       f"on a connected machine: sinklab jars fetch --all && sinklab jars export --all DIR; here: "
                       f"{jars.JARS_DIR_ENV}=DIR (or {jars.REPO_ENV}=a Maven mirror you can reach)")
    return Finding("jars", "warn", f"{detail}; downloaded from {repo}", FETCH_ALL)


def examine(ports: Sequence[int] = (LAB_PORT,)) -> list[Finding]:
    """Every check, in the order a new machine meets them."""
    return [check_python(), check_java(), check_notebooks(), check_chromium(), check_loopback(), check_ports(ports),
            check_disk(), check_jars()]
