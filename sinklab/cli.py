"""The ``sinklab`` command: a thin layer over the Python API."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sinklab.stack import STACK_FILE, Stack, StackInfo, stop_recorded
from sinklab.stack.process import pid_alive


class CliError(Exception):
    """An error the user can act on: printed without a traceback, exit status 1."""


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
    if path.exists():
        info = StackInfo.model_validate_json(path.read_text())
        alive = [name for name, pid in info.pids.items() if pid and pid_alive(pid)]
        if alive:
            raise CliError(f"a stack is already running in {path.parent} ({', '.join(alive)}); "
                           f"`sinklab stack down --workdir {args.workdir}` first")
    started = time.monotonic()
    stack = Stack.embedded(path.parent, catalog_token=args.token)
    try:
        stack.write(path)
    except BaseException:
        stack.close()
        raise
    info = stack.detach()
    print(f"stack ready in {time.monotonic() - started:.1f}s; described in {path}")
    print(f"  bootstrap_servers  {info.bootstrap_servers}")
    print(f"  catalog_uri        {info.catalog_uri}")
    print(f"  warehouse          {info.warehouse}")
    return 0


def cmd_stack_down(args: argparse.Namespace) -> int:
    info = _read_info(args.workdir)
    stopped = stop_recorded(info)
    info.pids = {}
    _stack_file(args.workdir).write_text(info.model_dump_json(indent=2) + "\n")
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def cmd_stack_status(args: argparse.Namespace) -> int:
    info = _read_info(args.workdir)
    states = {name: ("running" if pid and pid_alive(pid) else "stopped") for name, pid in info.pids.items()}
    report = {"stack": str(_stack_file(args.workdir)), "processes": {
        name: {"pid": info.pids[name], "state": state} for name, state in states.items()
    }, "bootstrap_servers": info.bootstrap_servers, "catalog_uri": info.catalog_uri}
    print(json.dumps(report, indent=2))
    return 0 if states and all(s == "running" for s in states.values()) else 3


def cmd_demo(args: argparse.Namespace) -> int:
    from sinklab.demo import run_demo

    run_demo(workdir=Path(args.workdir) if args.workdir else None, count=args.count,
             interval_ms=args.interval_ms)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sinklab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="the pizza story on the embedded stack")
    demo.add_argument("--workdir", help="keep the stack's files here (default: a temporary directory)")
    demo.add_argument("--count", type=int, default=20000, help="pizzas to produce")
    demo.add_argument("--interval-ms", type=int, default=3000, help="commit interval for the demo")
    demo.set_defaults(func=cmd_demo)

    stack = sub.add_parser("stack", help="start, stop and inspect the embedded stack")
    stack_sub = stack.add_subparsers(dest="stack_command", required=True)
    up = stack_sub.add_parser("up", help="start broker and catalog in the background; writes DIR/stack.json")
    up.add_argument("--workdir", required=True)
    up.add_argument("--token", help="bearer token the REST catalog requires")
    up.set_defaults(func=cmd_stack_up)
    down = stack_sub.add_parser("down", help="stop everything `stack up` started")
    down.add_argument("--workdir", required=True)
    down.set_defaults(func=cmd_stack_down)
    status = stack_sub.add_parser("status", help="show the stack's processes (exit 3 if any is down)")
    status.add_argument("--workdir", required=True)
    status.set_defaults(func=cmd_stack_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"sinklab: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("sinklab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
