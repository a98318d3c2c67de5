"""`sinklab stack up/down/status`: the embedded stack in a workdir, or the compose stack's services."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sinklab.commands.common import read_info, stack_file
from sinklab.exceptions import EXIT_NEEDS_LOOK, EXIT_OK, CliError
from sinklab.stack import Stack, StackInfo, stop_recorded
from sinklab.stack.process import pid_alive


def cmd_stack_up(args: argparse.Namespace) -> int:
    path = stack_file(args.workdir)
    if args.compose:
        return _stack_up_compose(args, path)
    previous = StackInfo.model_validate_json(path.read_text()) if path.exists() else None
    resume = None
    if previous is not None and previous.kind == "embedded":
        alive = [name for name, pid in previous.pids.items() if pid and pid_alive(pid)]
        if alive and len(alive) == len(previous.pids):
            raise CliError(f"a stack is already running in {path.parent} ({', '.join(alive)}); "
                           f"`sinklab stack down --workdir {args.workdir}` first")
        if alive:
            if previous.storage != args.storage:
                raise CliError(f"the stack in {path.parent} runs with --storage {previous.storage}, "
                               f"not {args.storage}; `sinklab stack down --workdir {args.workdir}` first")
            # Some of its processes died: start those again, keep the others.
            resume = previous
    started = time.monotonic()
    # A stack that had a schema registry gets it back: its schemas are in the workdir.
    registry = args.schema_registry or bool(previous and previous.kind == "embedded" and "schema-registry" in
                                            previous.ports)
    if previous is not None and previous.kind == "embedded" and args.brokers not in (None, previous.brokers):
        raise CliError(f"the workdir {path.parent} holds a stack of {previous.brokers} broker(s), whose data a "
                       f"stack of {args.brokers} cannot take over; use another --workdir")
    # Spark Connect likewise: its notebooks' clients find it where they found it before.
    spark_connect = args.spark_connect or bool(previous and previous.kind == "embedded" and previous.spark_connect_url)
    stack = Stack.embedded(path.parent, storage=args.storage, resume=resume or previous,
                           connect_port=args.connect_port, schema_registry=registry, brokers=args.brokers,
                           spark="connect" if spark_connect else None, secure=args.secure or None)
    try:
        stack.write(path)
    except BaseException:
        stack.close()
        raise
    restarted = [name for name in stack.info.pids if not (resume and resume.pids.get(name) == stack.info.pids[name])]
    info = stack.detach()
    print(f"stack ready in {time.monotonic() - started:.1f}s ({', '.join(restarted)} started); described in {path}")
    print(f"  bootstrap_servers  {info.bootstrap_servers}" + (f"  ({info.brokers} brokers, every topic on each)"
                                                          if info.brokers > 1 else ""))
    if info.secure:
        security = info.kafka_security
        print(f"  kafka login        {security['security.protocol']} {security['sasl.mechanisms']} as "
              f"{security['sasl.username']}, password {security['sasl.password']}, CA {security['ssl.ca.location']}")
    print(f"  catalog_uri        {info.catalog_uri}")
    print(f"  warehouse          {info.warehouse}")
    print(f"  connect_url        {info.connect_url}  (Kafka Connect REST API)")
    if info.spark_connect_url:
        print(f"  spark_connect_url  {info.spark_connect_url}  (Spark Connect, on the Connect server's driver)")
    if info.schema_registry_url:
        print(f"  schema_registry    {info.schema_registry_url}  (Apicurio Registry, Confluent-compatible API)")
    if "s3" in info.pids:
        print(f"  s3 endpoint        {info.catalog_properties['s3.endpoint']} (moto: objects live in memory "
              "until `stack down`)")
    return 0


def _stack_up_compose(args: argparse.Namespace, path: Path) -> int:
    """Connect to compose.yaml's services; they are Docker's to start and stop, never sinklab's."""
    from sinklab.exceptions import ComposeNotRunning

    if args.storage != "local":
        raise CliError("--compose connects to the compose stack as compose.yaml configures it (MinIO storage); "
                       "drop --storage")
    try:
        stack = Stack.compose(inside=False)
    except ComposeNotRunning as exc:
        raise CliError(str(exc)) from exc
    path.parent.mkdir(parents=True, exist_ok=True)
    stack.write(path)
    print(f"connected to the compose stack; described in {path}")
    print(f"  bootstrap_servers  {stack.info.bootstrap_servers}")
    print(f"  catalog_uri        {stack.info.catalog_uri}")
    print(f"  warehouse          {stack.info.warehouse} (MinIO at {stack.info.catalog_properties['s3.endpoint']})")
    return 0


def cmd_stack_down(args: argparse.Namespace) -> int:
    info = read_info(args.workdir)
    if info.kind == "compose":
        raise CliError("the compose stack's services are Docker's: stop them with `docker compose down`")
    stopped = stop_recorded(info)
    info.pids = {}
    stack_file(args.workdir).write_text(info.model_dump_json(indent=2) + "\n")
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def cmd_stack_status(args: argparse.Namespace) -> int:
    info = read_info(args.workdir)
    if info.kind == "compose":
        from sinklab.stack.compose import ON_HOST, unreachable

        problems = unreachable(ON_HOST)
        print(json.dumps({"stack": str(stack_file(args.workdir)), "kind": "compose", "unreachable": problems,
                          "bootstrap_servers": info.bootstrap_servers, "catalog_uri": info.catalog_uri}, indent=2))
        return EXIT_NEEDS_LOOK if problems else EXIT_OK
    states = {name: ("running" if pid and pid_alive(pid) else "stopped") for name, pid in info.pids.items()}
    report = {"stack": str(stack_file(args.workdir)), "processes": {
        name: {"pid": info.pids[name], "state": state} for name, state in states.items()
    }, "bootstrap_servers": info.bootstrap_servers, "catalog_uri": info.catalog_uri, "connect_url": info.connect_url,
        **({"spark_connect_url": info.spark_connect_url} if info.spark_connect_url else {})}
    print(json.dumps(report, indent=2))
    return 0 if states and all(s == "running" for s in states.values()) else 3
