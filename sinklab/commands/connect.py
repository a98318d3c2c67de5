"""`sinklab connect`: serve Kafka Connect's REST API on a stack, apply/diff a folder of connectors, or validate one."""

from __future__ import annotations

import argparse
from pathlib import Path

from sinklab.commands.common import log_to_stderr
from sinklab.exceptions import EXIT_CHANGES, EXIT_OK, CliError
from sinklab.stack import STACK_FILE, StackInfo


def _connect_url(args: argparse.Namespace) -> tuple[str, tuple[str, str] | None]:
    """The Connect server to talk to: --url, else the stack.json's connect_url, else Connect's default;
    and its login, where the stack.json has one."""
    stack_file = args.target_stack or args.stack
    info = None
    if stack_file:
        path = Path(stack_file)
        info = StackInfo.model_validate_json((path / STACK_FILE if path.is_dir() else path).read_text())
    auth = info.connect_auth() if info is not None else None
    if args.url:
        return str(args.url), auth
    if info is not None:
        if not info.connect_url:
            raise CliError(f"{stack_file}: the stack runs no Connect server (no connect_url); give --url")
        return info.connect_url, auth
    return "http://localhost:8083", None


def cmd_connect(args: argparse.Namespace) -> int:
    from sinklab.connect.apply import apply, diff
    from sinklab.exceptions import ApplyError
    if args.connect_command == "validate":
        from sinklab.sink.config import load_config

        config = load_config(args.config)  # a ConfigError names the key, in one line, exit 1
        print(f"{config.name}: sinklab runs it" + (f"; {len(config.notes)} note(s):" if config.notes else ""))
        for note in config.notes:
            print(f"  {note}")
        return EXIT_OK
    if args.connect_command in ("apply", "diff"):
        try:
            url, auth = _connect_url(args)
            if args.connect_command == "apply":
                apply(url, args.dir, prune=args.prune, auth=auth)
                return 0
            changes = diff(url, args.dir, prune=args.prune, auth=auth)
        except ApplyError as exc:
            raise CliError(str(exc)) from None
        pending = [c for c in changes if c.changes]
        print(f"{len(pending)} connector(s) would change" if pending else "no changes")
        # Non-zero when apply would change something: a CI check on a pull request.
        return EXIT_CHANGES if pending else EXIT_OK
    if not args.stack:
        raise CliError("connect: give --stack stack.json (the stack to run connectors on), or a subcommand "
                       "(apply, diff)")
    from sinklab.connect.worker import run
    from sinklab.exceptions import StoreLocked

    log_to_stderr()
    try:
        run(args.stack, args.host, args.port, args.state_dir)
    except StoreLocked as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"--port {args.port}: {exc.strerror}") from None
    return 0
