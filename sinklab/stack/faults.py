"""A fault injector: an HTTP-aware TCP proxy on 127.0.0.1 between a client and a server.

Put it between the sink and the REST catalog, or between Spark and the S3 server, by giving the
client the proxy's address; then make the server look slow, failing, dead, or deaf to one answer:

    with FaultProxy("127.0.0.1:8181") as proxy:
        proxy.fail(503, seconds=20)                       # every request answered 503 for 20 s
        proxy.delay(5, seconds=60)                        # every answer 5 s late for a minute
        proxy.swallow(publishes, times=1)                 # one commit reaches the server; its answer is lost
        proxy.on_request(publishes, kill_catalog)         # the server dies while a commit is in it
        proxy.down(); ...; proxy.up()                     # refused, as a killed server; then back

Each connection carries one request (the proxy asks the server to close after it, so clients open a
connection per request): every request meets the faults in force when it arrives. Written for the fault
matrix (tests/test_faults.py, through tests/faults.py) and the soak run (bench/soak.py); no package
does HTTP-level faults with a per-request predicate and a kill hook in-process. Standard library and
``sinklab.stack`` only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sinklab.stack.process import LOOPBACK, pid_alive

if TYPE_CHECKING:
    from sinklab.stack import Stack

__all__ = ["FaultProxy", "Match", "Request", "everything", "injected", "kill", "leader", "publishes", "writes"]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]


Match = Callable[[Request], bool]


def everything(request: Request) -> bool:
    return True


def writes(request: Request) -> bool:
    """An object store's writes (PUT of an object or a part, POST of a multipart upload)."""
    return request.method in ("PUT", "POST")


def publishes(request: Request) -> bool:
    """A REST catalog table commit (not a create: that POSTs to .../tables; not a metrics report)."""
    path = request.path.split("?", 1)[0]
    return request.method == "POST" and "/tables/" in path and not path.endswith("/metrics")


@dataclass
class _Fault:
    kind: str  # fail | delay | swallow | drop | hook | hold
    match: Match
    until: float | None  # monotonic deadline
    times: int | None  # requests it still applies to
    status: int = 503
    seconds: float = 0.0
    hook: Callable[[Request], None] | None = None
    hits: int = 0
    last_hit: float | None = None  # epoch s

    def takes(self, request: Request, now: float) -> bool:
        if self.until is not None and now >= self.until:
            return False
        if self.times is not None and self.times <= 0:
            return False
        if not self.match(request):
            return False
        if self.times is not None:
            self.times -= 1
        self.hits += 1
        self.last_hit = time.time()
        return True


@dataclass
class FaultProxy:
    target: str  # host:port of the real server
    port: int = 0
    seen: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        host, port = self.target.rsplit(":", 1)
        self._target = (host, int(port))
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # ---- lifecycle
    def __enter__(self) -> FaultProxy:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def up(self) -> None:
        """Listen (again, on the same port)."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Refuse connections and reset the open ones, as a killed server would."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for sock in list(self._open):
                _reset(sock)
            self._open.clear()

    # ---- faults
    def _add(self, fault: _Fault) -> _Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def fail(self, status: int = 503, seconds: float | None = None, match: Match = everything,
             times: int | None = None) -> _Fault:
        """Answer matching requests with ``status`` instead of passing them on."""
        return self._add(_Fault("fail", match, _deadline(seconds), times, status=status))

    def delay(self, by: float, seconds: float | None = None, match: Match = everything,
              times: int | None = None) -> _Fault:
        """Pass matching requests on, and their answers back ``by`` seconds late."""
        return self._add(_Fault("delay", match, _deadline(seconds), times, seconds=by))

    def swallow(self, match: Match = everything, times: int | None = 1, seconds: float | None = None) -> _Fault:
        """Pass matching requests on and let the server answer; the client gets no answer (reset)."""
        return self._add(_Fault("swallow", match, _deadline(seconds), times))

    def drop(self, match: Match = everything, times: int | None = 1, seconds: float | None = None) -> _Fault:
        """Reset matching connections without passing the request on."""
        return self._add(_Fault("drop", match, _deadline(seconds), times))

    def on_request(self, match: Match, hook: Callable[[Request], None], times: int | None = 1,
                   pass_on: bool = True) -> _Fault:
        """Pass a matching request on, then call ``hook`` (kill the server in it) before any answer; with
        ``pass_on=False``, call ``hook`` (kill the client) and never pass the request on."""
        return self._add(_Fault("hook" if pass_on else "hold", match, None, times, hook=hook))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    # ---- serving
    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        server = None
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            request = _parse(head)
            now = time.monotonic()
            with self._lock:
                self.seen.append(request)
                fault = next((f for f in self._faults if f.takes(request, now)), None)
            if fault is not None and fault.kind == "fail":
                body = f"fault injected: {fault.status}".encode()
                client.sendall(f"HTTP/1.1 {fault.status} Injected\r\nContent-Type: text/plain\r\nContent-Length: "
                               f"{len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
                return
            if fault is not None and fault.kind == "drop":
                _reset(client)
                return
            if fault is not None and fault.kind == "hold":
                assert fault.hook is not None
                fault.hook(request)
                _reset(client)
                return
            try:
                server = socket.create_connection(self._target, timeout=10)
            except OSError:
                _reset(client)
                return
            with self._lock:
                self._open.add(server)
            server.sendall(_one_request(head) + rest)
            # The rest of the request body (and anything after a 100 Continue) flows on as it comes.
            threading.Thread(target=_pipe, args=(client, server), daemon=True).start()
            if fault is not None and fault.kind == "hook":
                assert fault.hook is not None
                fault.hook(request)
                _reset(client)
                return
            swallow = fault is not None and fault.kind == "swallow"
            late = fault.seconds if fault is not None and fault.kind == "delay" else 0.0
            first = True
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if swallow:
                    continue  # the server answered; the client will never know
                if first and late:
                    time.sleep(late)
                first = False
                client.sendall(data)
            if swallow:
                _reset(client)
        except OSError:
            _reset(client)
        finally:
            with self._lock:
                self._open.discard(client)
                if server is not None:
                    self._open.discard(server)
            for sock in (client, server):
                if sock is not None:
                    # shutdown first: a close alone leaves the connection open while the pipe thread
                    # still blocks in recv on it, and the client would wait for the end of the answer.
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                    with contextlib.suppress(OSError):
                        sock.close()


@contextlib.contextmanager
def injected(stack: Stack, stack_file: Path) -> Iterator[tuple[FaultProxy, FaultProxy]]:
    """Injectors in front of an S3 stack's REST catalog and S3 server; ``stack_file`` is then the
    stack.json through which a client (a sink process) reaches both through them."""
    catalog_at = stack.info.catalog_uri.removeprefix("http://").split("/", 1)[0]
    s3_at = stack.info.catalog_properties["s3.endpoint"].removeprefix("http://")
    with FaultProxy(catalog_at) as catalog, FaultProxy(s3_at) as s3:
        info = stack.info.model_copy(deep=True)
        info.catalog_uri = info.catalog_uri.replace(catalog_at, catalog.address)
        info.catalog_properties["s3.endpoint"] = f"http://{s3.address}"
        info.pids = {}  # the processes stay the stack's
        stack_file.write_text(info.model_dump_json(indent=2))
        yield catalog, s3


def kill(stack: Stack, name: str) -> float:
    """SIGKILL one of the stack's processes (a broker node, the catalog) by its PID; returns when (epoch s)."""
    pid = stack.info.pids[name]
    at = time.time()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return at


def leader(stack: Stack, topic: str, partition: int = 0) -> str:
    """The stack.json name of the node leading a partition (``broker``, ``broker-2``, ...)."""
    meta = stack.admin().list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return "broker" if meta.leader == 1 else f"broker-{meta.leader}"


def _deadline(seconds: float | None) -> float | None:
    return time.monotonic() + seconds if seconds is not None else None


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a dead peer looks; no orderly end of the answer."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)  # wakes a pipe thread blocked reading it, sends nothing
    with contextlib.suppress(OSError):
        sock.close()


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _parse(head: bytes) -> Request:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers)


def _one_request(head: bytes) -> bytes:
    """The request head asking the server to close after answering: one request per connection."""
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while True:
            data = source.recv(65536)
            if not data:
                return
            sink.sendall(data)
