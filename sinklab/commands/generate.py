"""`sinklab generate`: fake events from a spec, produced to a stack's topics."""

from __future__ import annotations

import argparse
import sys
import time

from sinklab.commands.common import stack_for
from sinklab.exceptions import CliError


def cmd_generate(args: argparse.Namespace) -> int:
    from sinklab.generators import Generator, SpecError, TrafficProfile, load_spec

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
        traffic = TrafficProfile.load(args.traffic) if args.traffic else None
    except SpecError as exc:
        raise CliError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise CliError(f"--traffic {args.traffic}: {exc}") from None
    stack = stack_for(args)
    try:
        run = generator.produce(stack, args.topic, count=args.count, rate=args.rate, partitions=args.partitions,
                                daily_topics=args.daily or None, format=args.format,
                                registry_url=args.schema_registry, subject_strategy=args.subject_name_strategy,
                                traffic=traffic, speed=args.speed)
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
