"""`sinklab table compact/expire/clean/maintain/follow`: a table's maintenance beside a running sink."""

from __future__ import annotations

import argparse

from sinklab.commands.common import stack_for
from sinklab.exceptions import CliError


def cmd_table(args: argparse.Namespace) -> int:
    from sinklab import maintenance as m

    if args.table_command == "follow":
        return cmd_follow(args)
    default_age = m.DEFAULT_ORPHAN_MS if args.table_command == "clean" else m.DEFAULT_EXPIRE_MS
    try:
        age = m.parse_duration("--older-than", args.older_than) if getattr(args, "older_than", None) else default_age
        orphan_age = m.parse_duration("--orphans-older-than", args.orphans_older_than) \
            if getattr(args, "orphans_older_than", None) else m.DEFAULT_ORPHAN_MS
    except m.PolicyError as exc:
        raise CliError(str(exc)) from None
    sort_by = [c.strip() for c in args.sort.split(",") if c.strip()] if getattr(args, "sort", None) else None
    with stack_for(args) as stack:
        if stack.catalog.table_exists(tuple(args.table.split("."))) is False:
            raise CliError(f"table {args.table} not found in the catalog at {stack.info.catalog_uri}")
        target = m.Target.on(stack, args.table, control_topics=tuple(getattr(args, "control_topic", [])))
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


def cmd_follow(args: argparse.Namespace) -> int:
    """The policy of ``--config`` and ``--set`` on the tables, as their commits come, until interrupted."""
    from sinklab import maintenance as m
    from sinklab.exceptions import ConfigError
    from sinklab.sink.config import keys, read_connect_json

    conf: dict[str, object] = {}
    if args.config:
        try:
            conf = dict(read_connect_json(args.config, name="follow")[1])
        except ConfigError as exc:
            raise CliError(f"--config: {exc}") from None
    bad = [kv for kv in args.set if "=" not in kv]
    if bad:
        raise CliError(f"--set: {bad[0]!r} is not KEY=VALUE")
    conf.update(kv.split("=", 1) for kv in args.set)
    tables = args.tables or [t.strip() for t in str(conf.get("iceberg.tables", "")).split(",") if t.strip()]
    if not tables:
        raise CliError("name the tables to follow, or give a --config with iceberg.tables")
    try:
        policy = m.parse_policy({k: v for k, v in conf.items() if k.startswith(keys.MAINTENANCE_PREFIX)})
        poll_ms = m.parse_duration("--poll", args.poll)
    except m.PolicyError as exc:
        raise CliError(str(exc)) from None
    if not policy.enabled:
        raise CliError(f"no maintenance to run: set {keys.COMPACT_EVERY_COMMITS}, {keys.COMPACT_SMALL_FILES} or "
                       f"{keys.EXPIRE_EVERY_COMMITS} (in --config or with --set)")
    with stack_for(args) as stack:
        follower = m.Follower(stack, tables, policy, tuple(args.control_topic))
        print(f"following {', '.join(tables)} every {poll_ms / 1000:g} s", flush=True)
        for report in m.follow(follower, poll_ms / 1000, args.seconds):
            print(report.model_dump_json() if args.json else str(report), flush=True)
    return 0
