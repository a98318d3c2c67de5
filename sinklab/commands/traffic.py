"""`sinklab traffic TOPIC`: a topic's traffic shape, as a profile the generators and the explorer replay."""

from __future__ import annotations

import argparse

from sinklab.commands.common import stack_for
from sinklab.exceptions import CliError


def cmd_traffic(args: argparse.Namespace) -> int:
    from sinklab.generators import profile_topic
    from sinklab.maintenance import PolicyError, parse_duration

    try:
        window_ms = parse_duration("--window", args.window)
        bucket_ms = parse_duration("--bucket", args.bucket)
    except PolicyError as exc:
        raise CliError(str(exc)) from None
    stack = stack_for(args)
    try:
        profile = profile_topic(stack.kafka_config(), args.topic, window_ms / 1000, bucket_ms / 1000,
                                sample=args.sample)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.out:
        profile.save(args.out)
    if args.json:
        print(profile.model_dump_json(indent=1))
        return 0
    rates = profile.rates
    print(f"{args.topic}: {profile.records:,} records in {window_ms / 1000:g} s, {profile.buckets} buckets of "
          f"{profile.bucket_s:g} s; mean {sum(rates) / len(rates):,.1f}/s, peak {max(rates):,.1f}/s")
    print("partitions: " + ", ".join(f"{p} {share:.0%}" for p, share in profile.shares.items()))
    if profile.value_bytes:
        sizes = profile.value_bytes
        print(f"value bytes (of {profile.sampled} sampled): p10 {sizes[1]}, p50 {sizes[5]}, p90 {sizes[9]}, "
              f"max {sizes[-1]}")
    if profile.hot_keys:
        print("hot keys: " + ", ".join(f"{h.share:.0%} on partition {h.partition}" for h in profile.hot_keys))
    if args.out:
        print(f"written to {args.out}: `sinklab generate --traffic {args.out}`, `sinklab explore --traffic {args.out}`")
    return 0
