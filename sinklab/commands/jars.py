"""`sinklab jars fetch/export`: the JVM parts' jars, from Maven Central, and a copy for an air-gapped machine."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sinklab.exceptions import CliError
from sinklab.stack import jars
from sinklab.stack.registry_build import PART as REGISTRY_PART


def cmd_jars_fetch(args: argparse.Namespace) -> int:
    from sinklab.stack import registry_build

    known = jars.PARTS | jars.BENCH_PARTS
    if args.all and args.parts:
        raise CliError("jars fetch: --all or part names, not both")
    names = [*known, REGISTRY_PART] if args.all else args.parts
    unknown = [p for p in names if p not in known and p != REGISTRY_PART]
    if unknown:
        raise CliError(f"no part {', '.join(unknown)}; the parts are {', '.join([*known, REGISTRY_PART])}")
    # No names: the stack's parts only. The schema registry is built when named, or when a stack first
    # starts one (a minute and more the demo never uses); Apache's sink when named, or by what runs it.
    parts = [known[p] for p in names if p != REGISTRY_PART] if names else list(jars.PARTS.values())
    for part, found, seconds in jars.fetch(parts):
        size = sum(j.stat().st_size for j in found) / 1e6
        print(f"{part.name:14s} {len(found):3d} jars {size:6.1f} MB  {', '.join(part.coordinates)}"
              f"  (ready at {seconds:.1f}s)", flush=True)
    if REGISTRY_PART in names:
        started = time.monotonic()
        runner = registry_build.runner_jar()
        size = sum(f.stat().st_size for f in runner.parent.rglob("*.jar")) / 1e6
        print(f"{REGISTRY_PART:14s} built    {size:6.1f} MB  {':'.join(registry_build.APP)} (Quarkus app: "
              f"{runner.name})  ({time.monotonic() - started:.1f}s)")
    print(f"cache: {jars.cache_dir()}")
    return 0


def cmd_jars_export(args: argparse.Namespace) -> int:
    from sinklab.stack import registry_build

    parts = [*jars.PARTS.values(), *jars.BENCH_PARTS.values()] if args.all else None
    dest = jars.export(Path(args.dest).resolve(), parts)
    registry_build.export(dest)
    print(f"exported to {dest}; on the air-gapped machine: export {jars.JARS_DIR_ENV}={dest}")
    return 0
