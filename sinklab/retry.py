"""Which failures are worth trying again (``transient``), and the one loop that tries them again."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from sinklab.exceptions import (
    AccessDenied,
    CommitTimeout,
    CycleTooLarge,
    KafkaUnavailable,
    RecordError,
    SinkFenced,
    TableMissing,
)

# Java exceptions (by class name, as Spark's and py4j's messages carry them, causes included) of a
# service that is away or slow for now: the broker, the catalog, the object store. A cycle failing on
# one is aborted and tried again; nothing it did reached a table or the group's offsets.
_TRANSIENT_JAVA = re.compile(
    r"java\.io\.(IOException|UncheckedIOException|InterruptedIOException|EOFException)"
    r"|java\.net\.\w+Exception|java\.util\.concurrent\.TimeoutException"
    r"|org\.apache\.kafka\.common\.errors\.(?!OffsetOutOfRange|Authorization|Authentication|SerializationException)"
    r"\w+Exception"
    r"|org\.apache\.iceberg\.exceptions\.(ServiceUnavailable|ServiceFailure|REST|CommitStateUnknown|CommitFailed"
    r"|RuntimeIO)Exception"
    r"|org\.apache\.hc\.\S+(NoHttpResponse|ConnectTimeout|ConnectionClosed|HttpHostConnect)Exception"
    r"|software\.amazon\.awssdk\.core\.exception\.(SdkClientException|ApiCallTimeoutException"
    r"|ApiCallAttemptTimeoutException)"
    r"|S3Exception: .*Status Code: 5\d\d")
_OUT_OF_MEMORY = re.compile(r"java\.lang\.OutOfMemoryError|SparkOutOfMemoryError")
# The same from Python code Spark's tasks run (a fan-out's pyiceberg writer: pyarrow raises OSError for
# the object store's errors), as the last line of the worker's traceback in a PythonException.
_TRANSIENT_PYTHON = re.compile(r"^(OSError|ConnectionError|ConnectionResetError|ConnectionRefusedError|TimeoutError"
                               r"|BrokenPipeError): ", re.MULTILINE)


def text_of(exc: BaseException) -> str:
    """``str(exc)``, which for a Java exception asks its JVM, and that JVM may be gone."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - py4j's own failure to reach the JVM
        # PySpark's converted exceptions keep the message they were made with.
        desc = getattr(exc, "_desc", None)
        return desc if isinstance(desc, str) else "(its text died with Spark's driver JVM)"


def _java_text(exc: BaseException) -> str | None:
    """The message of an exception that came from the JVM (py4j's, or PySpark's converted ones)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return text_of(exc) if isinstance(exc, (Py4JJavaError, PySparkException)) else None


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then what caused it (or what it was raised while handling), each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def jvm_gone(exc: BaseException) -> bool:
    """Whether the failure is Spark's JVM gone (its answer empty, its connection refused, or a Java
    exception whose text can no longer be asked for)."""
    from py4j.protocol import Py4JJavaError, Py4JNetworkError

    for current in _causes(exc):
        if isinstance(current, Py4JNetworkError):
            return True
        if isinstance(current, Py4JJavaError):
            try:
                str(current)
            except Exception:  # noqa: BLE001 - the JVM that would answer is gone
                return True
    return False


def out_of_memory(exc: BaseException) -> bool:
    text = _java_text(exc)
    return text is not None and bool(_OUT_OF_MEMORY.search(text))


def transient(exc: BaseException) -> bool:
    """Whether a failed cycle is worth trying again as it is: a service it needs was away or slow
    (Kafka Connect retries a task's RetriableException the same way). Bad records, configuration,
    fencing, a refusal (credentials, grants) and a cycle too large for memory are not: trying again would
    fail again."""
    import requests
    from confluent_kafka import KafkaException
    from pyiceberg.exceptions import (
        CommitFailedException,
        CommitStateUnknownException,
        ServerError,
        ServiceUnavailableError,
    )

    from sinklab.security import refused

    for current in _causes(exc):
        if isinstance(current, (RecordError, TableMissing, SinkFenced, CycleTooLarge, AccessDenied)):
            return False
        if isinstance(current, (KafkaUnavailable, CommitTimeout, requests.ConnectionError, requests.Timeout,
                                ServerError, ServiceUnavailableError, CommitStateUnknownException,
                                CommitFailedException, TimeoutError, ConnectionError)):
            return True
        if isinstance(current, OSError) and not isinstance(current, (FileNotFoundError, PermissionError,
                                                                     IsADirectoryError, NotADirectoryError)):
            return True  # pyarrow's S3 and HTTP errors
        if isinstance(current, KafkaException):
            err = current.args[0] if current.args else None
            return not (hasattr(err, "fatal") and err.fatal()) and refused(err) is None
        text = _java_text(current)
        if text is not None:
            return not _OUT_OF_MEMORY.search(text) and bool(_TRANSIENT_JAVA.search(text)
                                                             or _TRANSIENT_PYTHON.search(text))
    return False


T = TypeVar("T")


def retrying(call: Callable[[], T], again: Callable[[BaseException], bool], *, attempts: int | None = None,
             timeout_s: float | None = None, delay_s: float = 0.0,
             before_again: Callable[[BaseException, int], None] | None = None) -> T:
    """``call()``, tried again while ``again(exc)`` says its failure may pass, up to ``attempts`` tries or
    ``timeout_s`` seconds; the last failure is raised as it is. ``before_again(exc, attempt)`` runs before
    each new try (to log, or to undo what the failed one left)."""
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:
            if (not again(exc) or (attempts is not None and attempt >= attempts)
                    or (deadline is not None and time.monotonic() >= deadline)):
                raise
            if before_again is not None:
                before_again(exc, attempt)
            if delay_s:
                time.sleep(delay_s)
