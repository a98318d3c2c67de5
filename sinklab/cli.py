"""The ``sinklab`` command: a thin layer over the Python API."""

# The command line (build_parser, main) is here; what each subcommand does is in sinklab/commands/, by noun.
# The handlers are imported into this module and build_parser, which main calls, reads them here: a test
# that replaces cli.cmd_sink_status before main reaches the parser (tests/test_retry.py).

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sinklab.commands import (
    cmd_connect,
    cmd_demo,
    cmd_dlq_replay,
    cmd_doctor,
    cmd_explore,
    cmd_generate,
    cmd_jars_export,
    cmd_jars_fetch,
    cmd_jvm_train,
    cmd_sink_run,
    cmd_sink_status,
    cmd_stack_down,
    cmd_stack_status,
    cmd_stack_up,
    cmd_table,
    cmd_traffic,
)
from sinklab.exceptions import EXIT_CODES, EXIT_INTERRUPTED, SinkError, SinklabError
from sinklab.retry import text_of
from sinklab.stack import jars


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

    doctor = sub.add_parser(
        "doctor", help="whether this machine runs sinklab and its tutorials: Python, Java, the notebooks extra, "
                       "Chromium, ports, disk, the jars (what is here, what a workshop would download); a fix for "
                       "each problem (exit 1 if one the demo needs)")
    doctor.add_argument("--port", type=int, action="append", help="a port to find free on 127.0.0.1 (default: "
                                                                  "JupyterLab's 8888; repeatable)")
    doctor.add_argument("--json", action="store_true", help="as JSON, one object per check")
    doctor.set_defaults(func=cmd_doctor)

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

    explore = sub.add_parser(
        "explore", help="the commit-interval explorer: a generated stream through sinklab's sink or Apache's own at "
                        "each interval, its visibility, snapshots and files measured")
    explore.add_argument("--sink", default="sinklab", help="sinklab, apache (Apache's Iceberg sink in a Kafka "
                                                           "Connect worker), or both: apache,sinklab")
    explore.add_argument("--config", help="a connector's JSON whose settings every run takes (its knobs: "
                                          "iceberg.control.commit.timeout-ms, tasks.max, ...); its topics, tables "
                                          "and interval are each run's own")
    explore.add_argument("--stack", help="stack.json of the stack to run on (default: an embedded stack for the run)")
    explore.add_argument("--intervals", default="1s,5s", help="commit intervals, comma-separated (2s,10s,60s)")
    explore.add_argument("--rate", type=float, default=500.0, help="events per second")
    explore.add_argument("--seconds", type=float, default=20.0, help="how long each interval's stream runs")
    explore.add_argument("--traffic", metavar="PROFILE.json", help="replay a topic's traffic profile (`sinklab "
                         "traffic`) instead of --rate: its rate curve, partitions, sizes, hot keys")
    explore.add_argument("--speed", type=float, default=1.0, help="with --traffic: play its curve this many times "
                                                                  "faster")
    explore.add_argument("--generator", default="pizzas", help="a built-in stream or a spec file")
    explore.add_argument("--seed", type=int, default=7)
    explore.add_argument("--partitions", type=int, default=3)
    explore.add_argument("--json", metavar="FILE", help="also write the runs as JSON")
    explore.set_defaults(func=cmd_explore)

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
    gen.add_argument("--traffic", metavar="PROFILE.json", help="replay a topic's traffic profile (`sinklab traffic`): "
                     "its rate curve (unless --rate), partitions and their shares, value sizes, hot keys")
    gen.add_argument("--speed", type=float, default=1.0, help="with --traffic: play its curve this many times faster")
    gen.set_defaults(func=cmd_generate)

    traffic = sub.add_parser("traffic", help="a topic's traffic shape (per-partition rates from its offsets and "
                                             "timestamps, value sizes and hot keys from a sample) as a profile the "
                                             "generators and the explorer replay; reads, commits nothing")
    traffic.add_argument("topic")
    traffic.add_argument("--stack", help="stack.json of the stack (or cluster) the topic is on; its credentials")
    traffic.add_argument("--window", default="1h", metavar="AGE", help="how far back (default 1h)")
    traffic.add_argument("--bucket", default="1m", metavar="AGE", help="the rate curve's step (default 1m)")
    traffic.add_argument("--sample", type=int, default=1000, help="newest records sampled for sizes and keys")
    traffic.add_argument("--out", metavar="PROFILE.json", help="write the profile here")
    traffic.add_argument("--json", action="store_true", help="print the profile as JSON")
    traffic.set_defaults(func=cmd_traffic)

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
        if verb in ("clean", "maintain"):
            control_topic_option(cmd)
        cmd.set_defaults(func=cmd_table)
    follow = table_sub.add_parser(
        "follow", help="run a maintenance policy (sinklab.maintenance.* keys) beside another sink, Apache's: "
                       "as its commits come to the tables")
    follow.add_argument("tables", nargs="*", metavar="TABLE",
                        help="namespace.table (default: the --config's iceberg.tables)")
    follow.add_argument("--config", help="a JSON file holding the sinklab.maintenance.* keys (a connector's config, "
                                         "Apache's sink ignores them)")
    follow.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a policy key (repeatable)")
    follow.add_argument("--stack", help="stack.json of the stack whose catalog holds the tables")
    follow.add_argument("--poll", default="5s", metavar="AGE", help="how often to look at the tables (default 5s)")
    follow.add_argument("--seconds", type=float, help="stop after this long (default: until interrupted)")
    follow.add_argument("--json", action="store_true", help="one JSON report per operation")
    control_topic_option(follow)
    follow.set_defaults(func=cmd_table)

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
    up.add_argument("--secure", action="store_true",
                    help="Kafka asks every client for a password over TLS (SASL_SSL, SCRAM-SHA-256; the stack makes "
                         "its CA, certificates and passwords in the workdir); stack.json says how to log in, the "
                         "password by reference. One Kafka node; a stack started again stays secure")
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
                       ("diff", "print what apply would change; exit 4 when something would")):
        cmd = connect_sub.add_parser(verb, help=text)
        cmd.add_argument("dir", help="a folder of connector JSON files ({name, config} or a flat config named by "
                                     "its file)")
        cmd.add_argument("--prune", action="store_true",
                         help="also delete (apply) or count as a change (diff) connectors that are not in DIR")
        cmd.add_argument("--url", help="the Connect server (default: --stack's connect_url, else "
                                       "http://localhost:8083)")
        cmd.add_argument("--stack", dest="target_stack", help="stack.json whose connect_url to use")
        cmd.set_defaults(func=cmd_connect)
    validate = connect_sub.add_parser(
        "validate", help="read a connector config as the sink would: every key it ignores, and why; exit 1 on a "
                         "key it refuses, naming it")
    validate.add_argument("config", help="a connector JSON file ({name, config} or a flat config named by its file)")
    validate.set_defaults(func=cmd_connect)

    jar = sub.add_parser("jars", help="the JVM parts' jars, from Maven Central by pinned coordinate")
    jar_sub = jar.add_subparsers(dest="jars_command", required=True)
    fetch = jar_sub.add_parser("fetch", help="resolve the parts (default: the stack's, not the bench's) into the "
                                             "cache (make setup runs this)")
    fetch.add_argument("parts", nargs="*", metavar="PART",
                       help=f"of {', '.join(jars.PARTS)}, schema-registry (built from its jars); on demand: "
                            f"{', '.join(jars.BENCH_PARTS)}")
    fetch.add_argument("--all", action="store_true", help="every part: what any tutorial, test or bench runs (before "
                                                          "a workshop: the laptops then run offline)")
    fetch.set_defaults(func=cmd_jars_fetch)
    export = jar_sub.add_parser("export", help="copy every part's jars to DIR/<part>/ (and the built schema registry "
                                               "to DIR/schema-registry/), for SINKLAB_JARS_DIR on an air-gapped "
                                               "machine")
    export.add_argument("dest")
    export.add_argument("--all", action="store_true", help=f"the on-demand parts too ({', '.join(jars.BENCH_PARTS)}: "
                                                           "Apache's sink for notebook 11 and the tests)")
    export.set_defaults(func=cmd_jars_export)

    jvm = sub.add_parser("jvm", help="the Spark driver's class archive: a warm first cycle")
    jvm_sub = jvm.add_subparsers(dest="jvm_command", required=True)
    train = jvm_sub.add_parser("train", help="train the archive Spark drivers map with SINKLAB_JVM_ARCHIVE=on (a "
                                             "stack then also trains it in the background when it is missing)")
    train.add_argument("--force", action="store_true", help="train again even when the archive exists")
    train.set_defaults(func=cmd_jvm_train)
    return parser


def control_topic_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--control-topic", action="append", default=[], metavar="TOPIC",
                     help="beside Apache's sink: a control topic of it beyond its default one and those the table "
                          "records (repeatable); what it has in flight there is kept")


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
