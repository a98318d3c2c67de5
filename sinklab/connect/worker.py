"""The Connect worker process: attach to a stack, resume the stored connectors, serve the REST API,
and on SIGTERM stop every sink cleanly (their target states stay stored, so the next start resumes)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from sinklab.connect.herder import Herder
from sinklab.connect.offsets import GroupOffsets
from sinklab.connect.server import ConnectApi, ConnectServer
from sinklab.connect.sessions import SinkSessions
from sinklab.connect.store import ConnectorStore
from sinklab.sink.config import SinkConfig
from sinklab.stack import Stack

log = logging.getLogger("sinklab.connect")


class Worker:
    """A Connect server on a stack: herder + HTTP server, and the sinks its Spark Connect clients run here
    (``sessions``). ``close`` stops the sinks and Spark."""

    def __init__(self, stack: Stack, state_dir: Path | None, host: str = "127.0.0.1", port: int = 8083):
        from sinklab.maintenance import schedule
        from sinklab.sink import IcebergSink

        self.stack = stack
        self.store = ConnectorStore(state_dir)
        self.store.acquire()
        offsets = GroupOffsets(stack.kafka_config())

        def make_sink(config: SinkConfig) -> IcebergSink:
            return IcebergSink(stack, config, between_cycles=schedule(config))

        self.herder = Herder(make_sink, self.store, offsets, worker_id="")
        self.sessions = SinkSessions(make_sink, self.herder.names)
        try:
            # Bound before any connector resumes: a port in use fails before anything runs.
            self.server = ConnectServer(ConnectApi(self.herder, offsets.cluster_id, self.sessions), host, port,
                                        basic_auth=stack.info.connect_auth())
        except BaseException:
            self.store.release()
            raise
        # Connect's worker id is the host:port a client reaches the worker on.
        self.herder.worker_id = f"{self.server.host}:{self.server.port}"

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> Worker:
        self.server.start()
        self.herder.start()
        log.info("Kafka Connect REST API on %s (connectors in %s)", self.url, self.store.state_dir)
        return self

    def close(self) -> None:
        try:
            self.server.close()
            self.sessions.close()
            self.herder.close()
        finally:
            self.store.release()
            self.stack.stop_spark()


def default_state_dir(stack_file: Path, stack: Stack) -> Path:
    """Where Connect's state goes: the stack's workdir, else beside the stack.json."""
    base = stack.workdir if stack.workdir is not None else stack_file.parent
    return base / "connect"


def run(stack_file: str | Path, host: str = "127.0.0.1", port: int = 8083, state_dir: str | Path | None = None,
        announce: bool = True, spark_connect_port: int | None = None) -> None:
    """Serve until SIGTERM or SIGINT; with ``spark_connect_port``, the driver serves Spark Connect too."""
    from sinklab.stack.spark import spark_connect_conf

    stack_path = Path(stack_file)
    if stack_path.is_dir():
        stack_path = stack_path / "stack.json"
    stack = Stack.from_file(stack_path)
    if spark_connect_port is not None:
        settings = stack.spark_settings
        stack.spark_settings = settings.model_copy(update={"conf": {**settings.conf,
                                                                    **spark_connect_conf(spark_connect_port)}})
    worker = Worker(stack, Path(state_dir) if state_dir else default_state_dir(stack_path, stack), host, port)
    done = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping the connectors", signum)
        done.set()

    # The HTTP server runs in its own thread: a handler here only sets the event (shutting the
    # server down from the thread that serves it would deadlock).
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if spark_connect_port is not None:
            _ = stack.spark  # the driver, and Spark Connect with it, before the REST API answers
        worker.start()
        if announce:
            print(f"Kafka Connect REST API on {worker.url} (connectors in {worker.store.state_dir}); "
                  "Ctrl-C stops it", flush=True)
        done.wait()  # a signal's handler runs on this thread and sets it
    finally:
        worker.close()
