"""`sinklab doctor`: this machine's readiness for sinklab and its tutorials, in one screen."""

from __future__ import annotations

import argparse
import json

from sinklab import doctor

MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}


def cmd_doctor(args: argparse.Namespace) -> int:
    findings = doctor.examine(ports=args.port or (doctor.LAB_PORT,))
    if args.json:
        print(json.dumps([f.as_dict() for f in findings], indent=2))
    else:
        for f in findings:
            print(f"{MARK[f.level]}  {f.name:10s} {f.detail}")
            if f.fix:
                print(f"{'':16s}fix: {f.fix}")
        fails = sum(f.level == "fail" for f in findings)
        warns = sum(f.level == "warn" for f in findings)
        print(f"\n{fails} to fix, {warns} to know" if fails or warns else "\nready")
    return 1 if any(f.level == "fail" for f in findings) else 0
