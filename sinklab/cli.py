"""The ``sinklab`` command: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sinklab.exceptions import (
    EXIT_CHANGES,
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_NEEDS_LOOK,
    EXIT_OK,
    CliError,
    SinkError,
    SinklabError,
)
from sinklab.retry import text_of
from sinklab.stack import STACK_FILE, Stack, StackInfo, jars, stop_recorded
from sinklab.stack.process import pid_alive
from sinklab.stack.registry_build import PART as REGISTRY_PART


def _stack_file(workdir: str) -> Path:
    return Path(workdir).resolve() / STACK_FILE


def _read_info(workdir: str) -> StackInfo:
    path = _stack_file(workdir)
    if not path.exists():
        raise CliError(
            f"no stack in {path.parent} ({STACK_FILE} not found); run `sinklab stack up --workdir {workdir}`"
        )
    return StackInfo.model_validate_json(path.read_text())


def cmd_stack_up(args: argparse.Namespace) -> int:
    path = _stack_file(args.workdir)
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
                           spark="connect" if spark_connect else None)
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
    info = _read_info(args.workdir)
    if info.kind == "compose":
        raise CliError("the compose stack's services are Docker's: stop them with `docker compose down`")
    stopped = stop_recorded(info)
    info.pids = {}
    _stack_file(args.workdir).write_text(info.model_dump_json(indent=2) + "\n")
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def cmd_stack_status(args: argparse.Namespace) -> int:
    info = _read_info(args.workdir)
    if info.kind == "compose":
        from sinklab.stack.compose import ON_HOST, unreachable

        problems = unreachable(ON_HOST)
        print(json.dumps({"stack": str(_stack_file(args.workdir)), "kind": "compose", "unreachable": problems,
                          "bootstrap_servers": info.bootstrap_servers, "catalog_uri": info.catalog_uri}, indent=2))
        return EXIT_NEEDS_LOOK if problems else EXIT_OK
    states = {name: ("running" if pid and pid_alive(pid) else "stopped") for name, pid in info.pids.items()}
    report = {"stack": str(_stack_file(args.workdir)), "processes": {
        name: {"pid": info.pids[name], "state": state} for name, state in states.items()
    }, "bootstrap_servers": info.bootstrap_servers, "catalog_uri": info.catalog_uri, "connect_url": info.connect_url,
        **({"spark_connect_url": info.spark_connect_url} if info.spark_connect_url else {})}
    print(json.dumps(report, indent=2))
    return 0 if states and all(s == "running" for s in states.values()) else 3


def cmd_demo(args: argparse.Namespace) -> int:
    from sinklab.demo import run_demo

    run_demo(workdir=Path(args.workdir) if args.workdir else None, count=args.count,
             interval_ms=args.interval_ms)
    return 0


def _stack_for(args: argparse.Namespace) -> Stack:
    if args.stack:
        stack = Stack.from_file(args.stack)
        master, conf = getattr(args, "master", None), getattr(args, "conf", None) or []
        if master or conf:
            bad = [c for c in conf if "=" not in c]
            if bad:
                raise CliError(f"--conf: {bad[0]!r} is not KEY=VALUE")
            settings = stack.spark_settings
            stack.spark_settings = settings.model_copy(update={
                "master": master or settings.master,
                "conf": {**settings.conf, **dict(c.split("=", 1) for c in conf)}})
        return stack
    raise CliError("--stack: give the stack.json of a running stack (`sinklab stack up --workdir DIR` writes one)")


def cmd_sink_run(args: argparse.Namespace) -> int:
    import faulthandler
    import logging
    import signal

    from sinklab.maintenance import schedule
    from sinklab.sink import IcebergSink, load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # `kill -USR1 <pid>` prints where each Python thread of a sink that seems stuck waits (jstack for its JVM).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = load_config(args.config)
    with _stack_for(args) as stack:
        sink = IcebergSink(stack, config, between_cycles=schedule(config))
        try:
            if args.once:
                result = sink.run_once()
                print(f"sink {config.name}: " + (f"committed {result.records} records to "
                      f"{', '.join(result.tables) or 'no table'} (commit {result.commit_id})" if result
                      else "nothing new"))
            else:
                idle = args.until_idle if args.until_idle is not None else float("inf")
                cycles = sink.run_until_idle(idle)
                status = sink.status()
                print(f"sink {config.name}: {cycles} cycles, {status.records} records")
        finally:
            sink.stop()
    return 0


def cmd_table(args: argparse.Namespace) -> int:
    from sinklab import maintenance as m

    default_age = m.DEFAULT_ORPHAN_MS if args.table_command == "clean" else m.DEFAULT_EXPIRE_MS
    try:
        age = m.parse_duration("--older-than", args.older_than) if getattr(args, "older_than", None) else default_age
        orphan_age = m.parse_duration("--orphans-older-than", args.orphans_older_than) \
            if getattr(args, "orphans_older_than", None) else m.DEFAULT_ORPHAN_MS
    except m.PolicyError as exc:
        raise CliError(str(exc)) from None
    sort_by = [c.strip() for c in args.sort.split(",") if c.strip()] if getattr(args, "sort", None) else None
    with _stack_for(args) as stack:
        if stack.catalog.table_exists(tuple(args.table.split("."))) is False:
            raise CliError(f"table {args.table} not found in the catalog at {stack.info.catalog_uri}")
        target = m.Target.on(stack, args.table)
        verb = args.table_command
        if verb == "compact":
            reports = [m.compact(target, args.target_file_size, sort_by)]
        elif verb == "expire":
            reports = [m.expire(target, age, args.retain_last)]
        elif verb == "clean":
            reports = [m.clean(target, age)]
        else:
            reports = m.maintain(target, age, orphan_age, args.retain_last, args.target_file_size, sort_by,
                                 not args.no_manifests)
    for report in reports:
        print(report.model_dump_json() if args.json else str(report))
    return 0


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    import logging

    from sinklab.maintenance import schedule
    from sinklab.sink import IcebergSink, load_config

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    config = load_config(args.config)
    with _stack_for(args) as stack:
        # The same config as `sink run` takes, maintenance keys and all (a replay runs no maintenance).
        sink = IcebergSink(stack, config, between_cycles=schedule(config))
        try:
            results = sink.replay(args.where)
        finally:
            sink.stop()
    if not results:
        print(f"sink {config.name}: no dead letters to replay in {config.dlq_table}")
    for r in results:
        into = ", ".join(f"{t} +{n:,}" for t, n in r.tables.items()) or "no table"
        print(f"replay {r.replay_id}: {r.claimed:,} dead letters, {r.replayed:,} replayed ({into}), "
              f"{r.failed:,} still failing")
    # Like `sink status`: non-zero when something needs a look (records that still fail).
    return EXIT_NEEDS_LOOK if any(r.failed for r in results) else EXIT_OK


def cmd_sink_status(args: argparse.Namespace) -> int:
    from sinklab.connect.report import format_reports, sink_reports

    stack = _stack_for(args)
    try:
        reports = sink_reports(stack, args.names or None)
    except LookupError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print(json.dumps([r.model_dump() for r in reports], indent=2))
    else:
        print(format_reports(reports))
    # Like `stack status`: non-zero when something needs a look (a failed sink).
    return EXIT_NEEDS_LOOK if any(r.state == "FAILED" for r in reports) else EXIT_OK


def _connect_url(args: argparse.Namespace) -> str:
    """The Connect server to talk to: --url, else the stack.json's connect_url, else Connect's default."""
    if args.url:
        return str(args.url)
    stack_file = args.target_stack or args.stack
    if stack_file:
        path = Path(stack_file)
        info = StackInfo.model_validate_json((path / STACK_FILE if path.is_dir() else path).read_text())
        if not info.connect_url:
            raise CliError(f"{stack_file}: the stack runs no Connect server (no connect_url); give --url")
        return info.connect_url
    return "http://localhost:8083"


def cmd_connect(args: argparse.Namespace) -> int:
    from sinklab.connect.apply import apply, diff
    from sinklab.exceptions import ApplyError
    if args.connect_command in ("apply", "diff"):
        try:
            url = _connect_url(args)
            if args.connect_command == "apply":
                apply(url, args.dir, prune=args.prune)
                return 0
            changes = diff(url, args.dir, prune=args.prune)
        except ApplyError as exc:
            raise CliError(str(exc)) from None
        pending = [c for c in changes if c.changes]
        print(f"{len(pending)} connector(s) would change" if pending else "no changes")
        # Non-zero when apply would change something: a CI check on a pull request.
        return EXIT_CHANGES if pending else EXIT_OK
    if not args.stack:
        raise CliError("connect: give --stack stack.json (the stack to run connectors on), or a subcommand "
                       "(apply, diff)")
    import logging

    from sinklab.connect.worker import run
    from sinklab.exceptions import StoreLocked

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        run(args.stack, args.host, args.port, args.state_dir)
    except StoreLocked as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"--port {args.port}: {exc.strerror}") from None
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from sinklab.generators import Generator, SpecError, load_spec

    if not args.kind and not args.spec:
        raise CliError("generate: name a built-in stream (pizzas, payments, cdc) or give --spec FILE")
    overrides: dict[str, object] = {"seed": args.seed}
    if args.bad_ratio is not None:
        overrides["bad_records"] = args.bad_ratio
    try:
        spec = load_spec(args.spec or args.kind)
        if args.cdc_format:
            if spec.cdc is None:
                raise CliError(f"--cdc-format: the spec {spec.name!r} has no `cdc` section")
            overrides["cdc"] = spec.cdc.model_copy(update={"format": args.cdc_format})
        generator = Generator(spec, **overrides)
    except SpecError as exc:
        raise CliError(str(exc)) from None
    stack = _stack_for(args)
    try:
        run = generator.produce(stack, args.topic, count=args.count, rate=args.rate, partitions=args.partitions,
                                daily_topics=args.daily or None, format=args.format,
                                registry_url=args.schema_registry, subject_strategy=args.subject_name_strategy)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    show = sys.stderr.isatty()
    try:
        while not run.done:
            time.sleep(0.2)
            if show:
                print(f"\r{run.delivered}/{args.count} delivered", end="", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        run.stop()
        raise
    finally:
        if show:
            print(file=sys.stderr)
    run.wait()
    topics = ", ".join(sorted(run.topics)) or args.topic
    bad = f" ({sum(run.bad.values())} bad: {dict(sorted(run.bad.items()))})" if run.bad else ""
    print(f"produced {run.delivered} {generator.name} to {topics}{bad} in {run.elapsed:.1f}s "
          f"({run.events_per_second:,.0f} events/s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sinklab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status:\n" + "\n".join(f"  {code:3d}  {what}" for code, what in EXIT_CODES.items()))
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the pizza story on the embedded stack")
    demo.add_argument("--workdir", help="keep the stack's files here (default: a temporary directory)")
    demo.add_argument("--count", type=int, default=20000, help="pizzas to produce")
    demo.add_argument("--interval-ms", type=int, default=3000, help="commit interval for the demo")
    demo.set_defaults(func=cmd_demo)

    sink = sub.add_parser("sink", help="run a sink")
    sink_sub = sink.add_subparsers(dest="sink_command", required=True)
    run = sink_sub.add_parser("run", help="run a sink from a Kafka Connect JSON config")
    run.add_argument("--config", required=True, help="Kafka Connect sink JSON ({name, config} or the flat map); a "
                                                     "bare name is also looked up in sinklab's packaged configs "
                                                     "(pizzas-on-ice.json)")
    run.add_argument("--stack", help="stack.json of the stack to run on")
    run.add_argument("--master", help="Spark master URL (spark://host:7077, yarn, k8s://...; default: the stack's, "
                                      "local[*])")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                     help="a Spark property for the sink's driver, e.g. spark.executor.memory=2g (repeatable)")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one commit cycle up to the current end offsets")
    mode.add_argument("--until-idle", type=float, metavar="SECONDS", help="stop after SECONDS with nothing new")
    run.set_defaults(func=cmd_sink_run)
    status = sink_sub.add_parser(
        "status", help="every sink on the stack: state (Connect's, for the sinks its Connect server runs), last "
                       "cycle, lag per partition, each table's last snapshot (exit 3 if one FAILED)")
    status.add_argument("names", nargs="*", metavar="NAME", help="only these sinks (default: all)")
    status.add_argument("--stack", help="stack.json of the stack the sinks run on")
    status.add_argument("--json", action="store_true", help="as JSON, one object per sink")
    status.set_defaults(func=cmd_sink_status)

    dlq = sub.add_parser("dlq", help="a sink's dead-letter table")
    dlq_sub = dlq.add_subparsers(dest="dlq_command", required=True)
    replay = dlq_sub.add_parser(
        "replay", help="write a sink's dead letters into their tables with its current config, exactly once; those "
                       "that still fail stay, with their new error (exit 3 if some do)")
    replay.add_argument("--config", required=True, help="the sink's Kafka Connect JSON, with "
                                                        "errors.deadletterqueue.table.name")
    replay.add_argument("--stack", help="stack.json of the stack the sink runs on")
    replay.add_argument("--where", help="only the dead letters this Spark SQL condition picks, e.g. "
                                        "\"error_class = 'type-mismatch'\"")
    replay.set_defaults(func=cmd_dlq_replay)

    gen = sub.add_parser("generate", help="produce fake events (specs: data-generators/README.md)")
    gen.add_argument("kind", nargs="?", choices=["pizzas", "payments", "cdc"], help="a built-in stream")
    gen.add_argument("--spec", help="a generator spec (YAML) instead of the built-in one")
    gen.add_argument("--topic", required=True, help="the topic, or the prefix of daily topics with --daily")
    gen.add_argument("--count", type=int, required=True)
    gen.add_argument("--rate", type=float, help="events per second (default: the spec's, else as fast as possible)")
    gen.add_argument("--partitions", type=int, default=6, help="partitions of topics it creates")
    gen.add_argument("--seed", type=int, help="same seed, same events (default: the spec's)")
    gen.add_argument("--bad-ratio", type=float, help="share of bad records, of every kind the spec can make")
    gen.add_argument("--daily", action="store_true", help="produce to TOPIC.YYYYMMDD by event time")
    gen.add_argument("--cdc-format", choices=["flat", "debezium"], help="for cdc specs: flat op field or Debezium")
    gen.add_argument("--stack", help="stack.json of the stack to produce to")
    gen.add_argument("--format", choices=["json", "avro", "json-schema"], default="json",
                     help="avro / json-schema: Confluent-framed Avro, or JSON with a JSON Schema, the schema "
                          "registered in the schema registry (each drift step of the spec registers a new version)")
    gen.add_argument("--schema-registry", metavar="URL",
                     help="for --format avro/json-schema: the registry (default: the stack's schema_registry_url)")
    gen.add_argument("--subject-name-strategy", default="TopicNameStrategy",
                     choices=["TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"],
                     help="for --format avro/json-schema: the subject the schema is registered under")
    gen.set_defaults(func=cmd_generate)

    table = sub.add_parser("table", help="maintain a table beside a running sink: compaction, snapshot expiry, "
                                         "orphan files")
    table_sub = table.add_subparsers(dest="table_command", required=True)
    for verb, text in (
            ("compact", "bin-pack small data files (and apply a row-level table's deletes)"),
            ("expire", "expire old snapshots, keeping what each sink's exactly-once recovery reads"),
            ("clean", "remove orphan files and dead staging branches older than a safety age"),
            ("maintain", "compact, rewrite manifests, expire, clean: in that order")):
        cmd = table_sub.add_parser(verb, help=text)
        cmd.add_argument("table", help="namespace.table")
        cmd.add_argument("--stack", help="stack.json of the stack whose catalog holds the table")
        cmd.add_argument("--json", action="store_true", help="one JSON report per operation")
        if verb in ("compact", "maintain"):
            cmd.add_argument("--target-file-size", type=int, metavar="BYTES",
                             help="size of the files compaction writes (default: the table's "
                                  "write.target-file-size-bytes)")
            cmd.add_argument("--sort", metavar="COLS", help="sort rows within the new files by these columns")
        if verb in ("expire", "maintain"):
            cmd.add_argument("--older-than", metavar="AGE", help="expire snapshots older than AGE (30m, 2h, 7d; "
                                                                "default 5d, Iceberg's)")
            cmd.add_argument("--retain-last", type=int, default=1, help="keep at least this many snapshots")
        if verb == "clean":
            cmd.add_argument("--older-than", metavar="AGE", help="safety age: only what is older goes (default 3d, "
                                                                "Iceberg's; more than your longest write)")
        if verb == "maintain":
            cmd.add_argument("--orphans-older-than", metavar="AGE", help="the clean step's safety age (default 3d)")
            cmd.add_argument("--no-manifests", action="store_true", help="skip the manifest rewrite")
        cmd.set_defaults(func=cmd_table)

    stack = sub.add_parser("stack", help="start, stop and inspect the embedded stack")
    stack_sub = stack.add_subparsers(dest="stack_command", required=True)
    up = stack_sub.add_parser("up", help="start broker and catalog in the background (or connect to the compose "
                                         "stack); writes DIR/stack.json")
    up.add_argument("--workdir", required=True)
    up.add_argument("--storage", choices=["local", "s3"], default="local",
                    help="where the warehouse lives: the workdir (local) or an embedded S3 server "
                         "(s3; needs sinklab[s3])")
    up.add_argument("--compose", action="store_true",
                    help="start nothing: connect to the services of compose.yaml (`docker compose up -d --wait` "
                         "first; needs a Docker engine)")
    up.add_argument("--connect-port", type=int,
                    help="port of the stack's Kafka Connect REST API (default: a free one; 8083 is Connect's)")
    up.add_argument("--brokers", type=int, choices=[1, 3],
                    help="Kafka nodes: 1 (the default), or 3 replicating every topic (a node may die); a stack "
                         "started again keeps its count")
    up.add_argument("--spark-connect", action="store_true",
                    help="start the Connect server's Spark driver at once and serve Spark Connect from it: "
                         "notebooks attach in seconds (Stack.from_file(..., spark='connect')); its URL goes "
                         "into stack.json as spark_connect_url")
    up.add_argument("--schema-registry", action="store_true",
                    help="also start a Confluent-compatible schema registry (Apicurio Registry; for Avro topics); "
                         "its URL goes into stack.json as schema_registry_url")
    up.set_defaults(func=cmd_stack_up)
    down = stack_sub.add_parser("down", help="stop everything `stack up` started")
    down.add_argument("--workdir", required=True)
    down.set_defaults(func=cmd_stack_down)
    status = stack_sub.add_parser("status", help="show the stack's processes (exit 3 if any is down)")
    status.add_argument("--workdir", required=True)
    status.set_defaults(func=cmd_stack_status)

    connect = sub.add_parser(
        "connect", help="the Kafka Connect REST API: run a server on a stack, or apply/diff a folder of connectors",
        description="With --stack: serve Kafka Connect's REST API on that stack until Ctrl-C (the embedded stack "
                    "starts one itself; see connect_url in its stack.json). apply/diff: connectors as code.")
    connect.add_argument("--stack", help="stack.json of the stack to run connectors on")
    connect.add_argument("--host", default="127.0.0.1", help="interface to listen on (default: loopback only)")
    connect.add_argument("--port", type=int, default=8083, help="port to listen on (default: 8083, Connect's)")
    connect.add_argument("--state-dir", help="where connector configs and target states are kept (default: the "
                                             "stack's workdir/connect, else beside stack.json)")
    connect.set_defaults(func=cmd_connect, connect_command=None)
    connect_sub = connect.add_subparsers(dest="connect_command")
    for verb, text in (("apply", "PUT every connector JSON of DIR; report created / updated / unchanged"),
                       ("diff", "print what apply would change; exit 2 when something would")):
        cmd = connect_sub.add_parser(verb, help=text)
        cmd.add_argument("dir", help="a folder of connector JSON files ({name, config} or a flat config named by "
                                     "its file)")
        cmd.add_argument("--prune", action="store_true",
                         help="also delete (apply) or count as a change (diff) connectors that are not in DIR")
        cmd.add_argument("--url", help="the Connect server (default: --stack's connect_url, else "
                                       "http://localhost:8083)")
        cmd.add_argument("--stack", dest="target_stack", help="stack.json whose connect_url to use")
        cmd.set_defaults(func=cmd_connect)

    jar = sub.add_parser("jars", help="the JVM parts' jars, from Maven Central by pinned coordinate")
    jar_sub = jar.add_subparsers(dest="jars_command", required=True)
    fetch = jar_sub.add_parser("fetch", help="resolve the parts (default: the stack's, not the bench's) into the "
                                             "cache (make setup runs this)")
    fetch.add_argument("parts", nargs="*", metavar="PART",
                       help=f"of {', '.join(jars.PARTS)}, schema-registry (built from its jars); on demand: "
                            f"{', '.join(jars.BENCH_PARTS)}")
    fetch.set_defaults(func=cmd_jars_fetch)
    export = jar_sub.add_parser("export", help="copy every part's jars to DIR/<part>/ (and the built schema registry "
                                               "to DIR/schema-registry/), for SINKLAB_JARS_DIR on an air-gapped "
                                               "machine")
    export.add_argument("dest")
    export.set_defaults(func=cmd_jars_export)

    jvm = sub.add_parser("jvm", help="the Spark driver's class archive: a warm first cycle")
    jvm_sub = jvm.add_subparsers(dest="jvm_command", required=True)
    train = jvm_sub.add_parser("train", help="train the archive Spark drivers map with SINKLAB_JVM_ARCHIVE=on (a "
                                             "stack then also trains it in the background when it is missing)")
    train.add_argument("--force", action="store_true", help="train again even when the archive exists")
    train.set_defaults(func=cmd_jvm_train)
    return parser


def cmd_jvm_train(args: argparse.Namespace) -> int:
    from sinklab.stack import jvm_archive

    archive = jvm_archive.path()
    if archive.exists() and not args.force:
        print(f"class archive {archive} ({archive.stat().st_size / 1e6:.0f} MB): trained already")
        return 0
    started = time.monotonic()
    try:
        archive = jvm_archive.train()
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    print(f"class archive {archive} ({archive.stat().st_size / 1e6:.0f} MB, trained in "
          f"{time.monotonic() - started:.0f}s); Spark drivers map it with {jvm_archive.ENV}=on")
    return 0


def cmd_jars_fetch(args: argparse.Namespace) -> int:
    from sinklab.stack import registry_build

    known = jars.PARTS | jars.BENCH_PARTS
    unknown = [p for p in args.parts if p not in known and p != REGISTRY_PART]
    if unknown:
        raise CliError(f"no part {', '.join(unknown)}; the parts are {', '.join([*known, REGISTRY_PART])}")
    # No names: the stack's parts only. The schema registry is built when named, or when a stack first
    # starts one (a minute and more the demo never uses); the bench's peer when named, or by the bench.
    parts = [known[p] for p in args.parts if p != REGISTRY_PART] if args.parts else list(jars.PARTS.values())
    for part, found, seconds in jars.fetch(parts):
        size = sum(j.stat().st_size for j in found) / 1e6
        print(f"{part.name:14s} {len(found):3d} jars {size:6.1f} MB  {', '.join(part.coordinates)}"
              f"  (ready at {seconds:.1f}s)", flush=True)
    if REGISTRY_PART in args.parts:
        started = time.monotonic()
        runner = registry_build.runner_jar()
        size = sum(f.stat().st_size for f in runner.parent.rglob("*.jar")) / 1e6
        print(f"{REGISTRY_PART:14s} built    {size:6.1f} MB  {':'.join(registry_build.APP)} (Quarkus app: "
              f"{runner.name})  ({time.monotonic() - started:.1f}s)")
    print(f"cache: {jars.cache_dir()}")
    return 0


def cmd_jars_export(args: argparse.Namespace) -> int:
    from sinklab.stack import registry_build

    dest = jars.export(Path(args.dest).resolve())
    registry_build.export(dest)
    print(f"exported to {dest}; on the air-gapped machine: export {jars.JARS_DIR_ENV}={dest}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except SinklabError as exc:  # expected: its message says what to do, no traceback
        kind = f"{type(exc).__name__}: " if isinstance(exc, SinkError) else ""  # what stopped the sink
        print(f"sinklab: error: {kind}{exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # the CLI's contract: any error is a message on stderr and a non-zero status
        import traceback

        traceback.print_exc(file=sys.stderr)
        print(f"sinklab: error: {type(exc).__name__}: {text_of(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sinklab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
