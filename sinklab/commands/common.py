"""What the commands share: the stack a command runs on, a workdir's stack.json, their log on stderr."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from sinklab.exceptions import CliError
from sinklab.stack import STACK_FILE, Stack, StackInfo


def stack_file(workdir: str) -> Path:
    """The stack.json of ``--workdir``."""
    return Path(workdir).resolve() / STACK_FILE


def read_info(workdir: str) -> StackInfo:
    """The stack.json of ``--workdir``; a ``CliError`` saying how to make one when there is none."""
    path = stack_file(workdir)
    if not path.exists():
        raise CliError(
            f"no stack in {path.parent} ({STACK_FILE} not found); run `sinklab stack up --workdir {workdir}`"
        )
    return StackInfo.model_validate_json(path.read_text())


def stack_for(args: argparse.Namespace) -> Stack:
    """The stack of ``--stack``, with the Spark of ``--master`` and ``--conf`` where the command has them."""
    if args.stack:
        stack = Stack.from_file(args.stack)
        master, conf = getattr(args, "master", None), getattr(args, "conf", None) or []
        if master or conf:
            bad = [c for c in conf if "=" not in c]
            if bad:
                raise CliError(f"--conf: {bad[0]!r} is not KEY=VALUE")
            settings = stack.spark_settings
            stack.spark_settings = settings.model_copy(update={
                "master": master or settings.master,
                "conf": {**settings.conf, **dict(c.split("=", 1) for c in conf)}})
        return stack
    raise CliError("--stack: give the stack.json of a running stack (`sinklab stack up --workdir DIR` writes one)")


def log_to_stderr() -> None:
    """The log of a long-running command (a sink, a replay, a Connect server) on stderr, without py4j's
    chatter."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
