"""Every error sinklab raises on purpose, under one root, ``SinklabError``.

An error carries what a caller acts on as fields (the config ``key``; the record's ``topic``,
``partition`` and ``offset``; the ``table``; the ``sink``), never only in its text: read the field,
do not parse the message. ``exit_code`` is what the ``sinklab`` command exits with when it stops on
one (the codes below, listed by ``sinklab --help``); an error of this module is printed as one line,
without a traceback. The built-in base beside the root (``ValueError``, ``RuntimeError``) is the one
each error had before the root existed, so ``except ValueError`` around a config keeps working.
"""

from __future__ import annotations

from typing import Any, ClassVar

# The command's exit statuses. 2 is argparse's for a wrong command line, as every Python command's.
EXIT_OK = 0
EXIT_ERROR = 1  # an error: sinklab's own in one line, an unexpected one with its traceback
EXIT_USAGE = 2  # the command line is wrong (argparse)
EXIT_NEEDS_LOOK = 3  # `stack status` / `sink status`: a process stopped, a sink FAILED; `dlq replay`: some still fail
EXIT_CHANGES = 4  # `connect diff`: applying the folder would change the server
EXIT_BAD_RECORD = 5  # a record the sink cannot write, with errors.tolerance=none: nothing was committed
EXIT_FENCED = 6  # a newer instance of the sink took over
EXIT_UNAVAILABLE = 7  # a service was away or too slow (Kafka, the catalog, storage): run again later
EXIT_DENIED = 8  # a service refused sinklab's login, certificate or access: fix the credentials or the grants
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "done",
    EXIT_ERROR: "an error: configuration, input, the stack, a sink that stopped (one line), or one sinklab did not "
                "expect (with its traceback)",
    EXIT_USAGE: "the command line is wrong",
    EXIT_NEEDS_LOOK: "stack status / sink status: something stopped or FAILED; dlq replay: some records still fail",
    EXIT_CHANGES: "connect diff: applying the folder would change the server",
    EXIT_BAD_RECORD: "a record the sink cannot write (errors.tolerance=none); nothing of its cycle was committed",
    EXIT_FENCED: "a newer instance of the sink took over",
    EXIT_UNAVAILABLE: "Kafka, the catalog or storage was away or too slow; run again later",
    EXIT_DENIED: "Kafka, the catalog or the Connect API refused the login, the certificate or the access (a topic, "
                 "a group); nothing was committed: fix the credentials or the grants and run again",
    EXIT_INTERRUPTED: "interrupted",
}


class SinklabError(Exception):
    """The root of sinklab's own errors."""

    exit_code: ClassVar[int] = EXIT_ERROR


# ---- configuration and input
class ConfigError(SinklabError, ValueError):
    """A configuration value is wrong: ``key`` names it (None when the file itself is wrong)."""

    def __init__(self, key: str | None, problem: str):
        self.key, self.problem = key, problem
        super().__init__(f"{key}: {problem}" if key else problem)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), (self.key, self.problem), {})


class SpecError(ConfigError):
    """A generator spec is wrong: ``key`` names the file and the field."""


class PolicyError(ConfigError):
    """A ``sinklab.maintenance.*`` value is wrong."""


class TableUnfit(ConfigError):
    """A table cannot take what the setting ``key`` asks of it: a format version too old for row-level
    deletes, no identifier fields for upsert, no VARIANT column for a whole value."""

    def __init__(self, key: str, problem: str, *, table: str, sink: str | None = None):
        self.table, self.sink = table, sink
        super().__init__(key, problem)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), (self.key, self.problem), {"table": self.table, "sink": self.sink})


class SecretReferenceError(ConfigError):
    """A secret's reference (``${env:NAME}``, ``${file:PATH:KEY}``, ...) names nothing: ``key`` is the setting,
    ``reference`` the reference as written. Never carries what a reference resolved to."""

    def __init__(self, key: str | None, reference: str, problem: str):
        self.reference = reference
        super().__init__(key, f"{reference}: {problem}")
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), (self.key, self.reference, self.problem), {})


class TransformError(SinklabError, ValueError):
    """A record a transform cannot handle (say, a Debezium envelope without ``op``)."""


class ControlEventError(SinklabError, ValueError):
    """A control-topic record sinklab cannot read as its event: ``magic`` and ``version`` are its first two
    bytes (None where the record is shorter); ``foreign`` when it is not sinklab's at all (another writer's,
    such as Apache Iceberg's sink on a control topic of the same name), which readers skip."""

    def __init__(self, problem: str, *, magic: int | None, version: int | None, foreign: bool):
        self.problem, self.magic, self.version, self.foreign = problem, magic, version, foreign
        super().__init__(problem)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), (self.problem,),
                          {"magic": self.magic, "version": self.version, "foreign": self.foreign})


class CliError(SinklabError):  # noqa: N818 - reads better at the raise sites
    """What the ``sinklab`` command cannot do as asked (no stack there, a name that is not a part); the
    message says what to give instead."""


# ---- the sink
class SinkError(SinklabError, RuntimeError):
    """What stops a sink's cycle; ``sink`` names the sink where it is known."""

    def __init__(self, message: str, *, sink: str | None = None, table: str | None = None):
        self.sink, self.table = sink, table
        super().__init__(message)


class RecordError(SinkError):
    """A record could not be converted or written; nothing of its cycle was committed."""

    exit_code = EXIT_BAD_RECORD

    def __init__(self, topic: str, partition: int, offset: int, table: str | None, reason: str, *,
                 kind: str | None = None, sink: str | None = None):
        self.topic, self.partition, self.offset, self.reason = topic, partition, offset, reason
        self.kind = kind or record_error_kind(reason)
        target = f" -> table {table}" if table else ""
        super().__init__(f"record {topic}[{partition}]@{offset}{target}: {reason}", sink=sink, table=table)

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), (self.topic, self.partition, self.offset, self.table, self.reason),
                          {"kind": self.kind, "sink": self.sink})


def record_error_kind(reason: str) -> str:
    """The kind of a per-record error (``undecodable``, ``type-mismatch``, ...): the text a cycle's
    conversion gives a bad record starts with it, ``kind: detail`` (the error column's format)."""
    return reason.split(":", 1)[0]


def _rebuild(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return cls(*args, **kwargs)


class TableMissing(SinkError):
    """A destination table does not exist and may not be created."""


class TopicMissing(SinkError):
    """A configured source topic does not exist on the broker."""

    def __init__(self, message: str, *, topics: list[str], sink: str | None = None):
        self.topics = topics
        super().__init__(message, sink=sink)


class CommitContended(SinkError):
    """A table kept moving under the cycle's compare-and-swap (other writers); the cycle gave up."""


class SinkFenced(SinkError):
    """A newer instance of the same sink took over; this one must stop."""

    exit_code = EXIT_FENCED


class AccessDenied(SinklabError, RuntimeError):  # noqa: N818 - reads better at the raise sites
    """A service refused sinklab: its login (a wrong password, an expired token), its connection (a
    certificate not trusted, TLS where the client spoke none) or its access (no ACL for a topic, a group, a
    transactional id). Fields: ``service`` (``kafka``, ``catalog``, ``connect``), ``address``, ``refused``
    (what was: ``login``, ``tls``, ``topic``, ``group``, ``transactional-id``, ``cluster``), ``resource`` (the
    topic's or group's name, where one was refused) and ``sink``. Never carries a secret. Not tried again:
    the same credentials would be refused again."""

    exit_code = EXIT_DENIED

    def __init__(self, service: str, address: str, refused: str, detail: str, *, resource: str | None = None,
                 sink: str | None = None):
        self.service, self.address, self.refused, self.resource, self.sink = service, address, refused, resource, sink
        self.detail = detail
        what = f"{refused} {resource}" if resource else refused
        super().__init__(f"{service} at {address} refused {what}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), (self.service, self.address, self.refused, self.detail),
                          {"resource": self.resource, "sink": self.sink})


class KafkaUnavailable(SinkError):
    """The broker did not answer a step of the cycle's Kafka transaction in time."""

    exit_code = EXIT_UNAVAILABLE


class StuckCall(KafkaUnavailable):
    """A transactional call of librdkafka did not return long after its own timeout."""


class CommitTimeout(SinkError):
    """Committing the tables took longer than iceberg.control.commit.timeout-ms."""

    exit_code = EXIT_UNAVAILABLE


class CycleTooLarge(SinkError):
    """A cycle's records did not fit in Spark's memory."""


class ReplayError(SinkError):
    """Dead letters cannot be replayed as asked: no dead-letter table, or a ``where`` Spark cannot read."""

    def __init__(self, message: str, *, sink: str | None = None, table: str | None = None, where: str | None = None):
        self.where = where
        super().__init__(message, sink=sink, table=table)


class RemoteSinkError(SinkError):
    """The server could not do what a remote sink asked of it, or failed with an error of no sinklab class."""


class RegistryError(SinklabError, RuntimeError):
    """The schema registry refused a request, or could not be reached; the message names the URL."""


# ---- the stack
class StackError(SinklabError, RuntimeError):
    """A part of the stack could not be started, reached or found."""


class ProcessError(StackError):
    """A managed process did not start, or died while it was needed."""


class JarsNotFound(StackError):
    """A part's jars could not be resolved; ``coordinate`` names the one that could not be fetched."""

    def __init__(self, message: str, *, coordinate: str | None = None):
        self.coordinate = coordinate
        super().__init__(message)


class ApacheSinkError(StackError):
    """Apache's Iceberg sink (its Connect worker) did not run or did not commit everything; the message
    says what failed and ends with the worker's log."""


class S3NotAvailable(StackError):
    """S3 storage was asked for and cannot be had here."""


class ComposeNotRunning(StackError):
    """The Docker Compose stack is not running."""


# ---- generators
class DeliveryError(SinklabError, RuntimeError):
    """Some records were not delivered; the message gives the count and the first errors."""


# ---- the Kafka Connect API
class ConnectError(SinklabError):
    """An error answered in Connect's shape: ``{"error_code": status, "message": ...}``; ``key`` names
    the config key it concerns, if one."""

    status: ClassVar[int] = 500

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.message, self.key = message, key


class NotFound(ConnectError):  # noqa: N818 - the HTTP status's name
    status = 404


class BadRequest(ConnectError):  # noqa: N818 - the HTTP status's name
    status = 400


class Conflict(ConnectError):  # noqa: N818 - the HTTP status's name
    status = 409


class ApplyError(SinklabError, RuntimeError):
    """A folder of connector configs cannot be applied (a file is invalid, the server refused a config
    or cannot be reached)."""


class StoreLocked(SinklabError, RuntimeError):  # noqa: N818 - reads better at the raise site
    """Another Connect server owns this state folder."""


# ---- the planner
class TargetUnreachable(SinklabError, ValueError):  # noqa: N818 - reads better at the raise site
    """No commit interval meets a latency target on this stack: ``best_s`` is the lowest worst-case
    latency any interval gives (at ``interval_s``, with cycles of ``cycle_s``)."""

    def __init__(self, target_s: float, *, best_s: float, interval_s: float, cycle_s: float):
        super().__init__(f"no interval meets {target_s:g} s here: the best is {best_s:.2f} s "
                         f"(interval {interval_s:.2f} s, cycles of {cycle_s:.2f} s)")
        self.target_s, self.best_s, self.interval_s, self.cycle_s = target_s, best_s, interval_s, cycle_s
