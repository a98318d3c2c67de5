"""`sinklab dlq replay`: a sink's dead letters back into their tables."""

from __future__ import annotations

import argparse

from sinklab.commands.common import log_to_stderr, stack_for
from sinklab.exceptions import EXIT_NEEDS_LOOK, EXIT_OK


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    from sinklab.maintenance import schedule
    from sinklab.sink import IcebergSink, load_config

    log_to_stderr()
    config = load_config(args.config)
    with stack_for(args) as stack:
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
