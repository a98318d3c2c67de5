"""Processes the stack starts: free ports, readiness checks, logs, and a clean stop."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sinklab.exceptions import ProcessError

LOOPBACK = "127.0.0.1"


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()
_random = random.SystemRandom()
# The servers' ports come from below the kernel's ephemeral range. A port bind(0) offers is one the
# kernel also hands any outgoing connection: in the seconds before a broker bound its listener, another
# process's client took it (CI, two workers starting stacks, 2026-11-26).
PORT_FLOOR = 20000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
EPHEMERAL_DEFAULT = 32768  # Linux's default floor; IANA's range (macOS, Windows) starts at 49152


def free_port() -> int:
    """A port free now, below the ephemeral range, and never one this process handed out before (the
    kernel's probe once gave a broker one port for its listener and its controller both)."""
    top = _ephemeral_floor()
    with _handed_out_lock:
        while True:
            if top - PORT_FLOOR >= 1000:
                port = _random.randrange(PORT_FLOOR, top)
                if not port_free(port):
                    continue
            else:  # a range configured down to here: the kernel's own choice
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind((LOOPBACK, 0))
                    port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port


def _ephemeral_floor() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_DEFAULT


def port_free(port: int) -> bool:
    """Whether a server can listen on ``port`` now (connections of a dead one may linger in TIME_WAIT,
    which servers ignore with SO_REUSEADDR, as Kafka and Jetty do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); it is gone for every purpose that matters here.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind this process (``SystemExit``) instead of ending it on the spot, so that the
    ``finally`` blocks and context managers that stop the servers it started run: a ``timeout``, a CI
    job's cancel or a kernel shut down would otherwise leave them running in their own sessions (seen:
    a benchmark stopped by ``timeout`` left its broker, catalog and Connect server). Only when no
    handler is installed, and from the main thread (where Python runs handlers)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def stop_pid(pid: int, timeout: float = 10.0, group: bool = True) -> None:
    """SIGTERM, wait up to ``timeout``, then SIGKILL: the broker sometimes ignores SIGTERM under load.

    ``group`` signals the process group the process leads (it was started in a new session), so
    helper children go too. Only ever called with PIDs this package started.
    """

    def send(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                try:
                    os.killpg(pid, sig)
                    return
                except ProcessLookupError:
                    pass
            os.kill(pid, sig)

    def alive() -> bool:
        _reap(pid)
        # The group, not only its leader: a server's JVM child (the catalog's) can outlive the leader
        # by a moment, still holding the port a restarted server wants.
        return pid_alive(pid) or (group and bool(_group_members(pid)))

    if not alive():
        return
    send(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            return
        time.sleep(0.05)
    send(signal.SIGKILL)
    for member in _group_members(pid) if group else []:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not alive():
            return
        time.sleep(0.05)
    raise ProcessError(f"process {pid} survived SIGKILL")


def stop_leader_first(pid: int, grace: float, timeout: float = 10.0) -> None:
    """SIGTERM to the leader alone, up to ``grace`` seconds to exit, then ``stop_pid`` on its group.

    For a server that stops its own children in order (the Connect server finishes its sinks' cycles,
    then stops its Spark JVM): signalling the whole group at once would kill the JVM under them.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            break
        time.sleep(0.05)
    stop_pid(pid, timeout=timeout)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


class ManagedProcess:
    """One server process: started in its own session, logged to a file, stopped by PID."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                # Own session: a Ctrl-C in a notebook must not reach the servers, and the stop
                # can signal the whole group.
                start_new_session=True,
            )

    def wait_ready(self, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.popen is not None and self.popen.poll() is not None:
                raise ProcessError(
                    f"{self.name} exited with status {self.popen.returncode} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                if check():
                    return
            except Exception as exc:  # noqa: BLE001 - readiness probes fail until the server is up
                last_error = exc
            time.sleep(0.1)
        self.stop()
        raise ProcessError(
            f"{self.name} was not ready after {timeout:.0f}s (last probe error: {last_error}); "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        stop_pid(self.popen.pid, timeout=timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=1)
        self.popen = None
