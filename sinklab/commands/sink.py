"""`sinklab sink run/status`: run a sink from its Kafka Connect config; every sink's state on a stack."""

from __future__ import annotations

import argparse
import json

from sinklab.commands.common import log_to_stderr, stack_for
from sinklab.exceptions import EXIT_NEEDS_LOOK, EXIT_OK, CliError


def cmd_sink_run(args: argparse.Namespace) -> int:
    import faulthandler
    import signal

    from sinklab.maintenance import schedule
    from sinklab.sink import IcebergSink, load_config

    log_to_stderr()
    # `kill -USR1 <pid>` prints where each Python thread of a sink that seems stuck waits (jstack for its JVM).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    config = load_config(args.config)
    with stack_for(args) as stack:
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


def cmd_sink_status(args: argparse.Namespace) -> int:
    from sinklab.connect.report import format_reports, sink_reports

    stack = stack_for(args)
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
