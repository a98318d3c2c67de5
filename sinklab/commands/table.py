"""`sinklab table compact/expire/clean/maintain`: a table's maintenance beside a running sink."""

from __future__ import annotations

import argparse

from sinklab.commands.common import stack_for
from sinklab.exceptions import CliError


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
    with stack_for(args) as stack:
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
