"""`sinklab demo`: the pizza story on the embedded stack."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_demo(args: argparse.Namespace) -> int:
    from sinklab.demo import run_demo

    run_demo(workdir=Path(args.workdir) if args.workdir else None, count=args.count,
             interval_ms=args.interval_ms)
    return 0
