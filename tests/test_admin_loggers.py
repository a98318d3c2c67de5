"""Kafka Connect's /admin/loggers on sinklab's API: levels of this process's loggers, Python's and its
Spark driver's, changed without a restart. (Not in test_connect.py, whose module stack has no Spark of
its own: one process holds one Spark driver, and this test needs the session stack's.)"""

from __future__ import annotations

from test_connect import FakeOffsets, FakeSink

from sinklab.connect.herder import Herder
from sinklab.connect.server import ConnectApi
from sinklab.connect.store import ConnectorStore
from sinklab.stack import Stack


def test_admin_loggers_change_levels_without_a_restart(stack: Stack) -> None:
    import logging

    api = ConnectApi(Herder(FakeSink, ConnectorStore(None), FakeOffsets(), "w:1"))
    jvm = stack.spark.sparkContext._jvm
    sink_logger, before = logging.getLogger("sinklab.sink"), logging.getLogger("sinklab.sink").level
    try:
        status, levels = api.handle("GET", "/admin/loggers", None)
        assert status == 200 and {"root", "sinklab"} <= set(levels)
        assert set(levels["root"]) == {"level", "last_modified"} and levels["root"]["last_modified"] is None

        status, changed = api.handle("PUT", "/admin/loggers/sinklab.sink", {"level": "debug"})
        assert status == 200 and "sinklab.sink" in changed
        assert sink_logger.getEffectiveLevel() == logging.DEBUG
        status, one = api.handle("GET", "/admin/loggers/sinklab.sink", None)
        assert status == 200 and one["level"] == "DEBUG" and isinstance(one["last_modified"], int)
        assert api.handle("GET", "/admin/loggers", None)[1]["sinklab.sink"]["level"] == "DEBUG"

        # The process's Spark driver JVM takes the same level for a logger of its own.
        assert api.handle("PUT", "/admin/loggers/org.apache.iceberg?scope=cluster", {"level": "TRACE"}) == (204, None)
        assert str(jvm.org.apache.logging.log4j.LogManager.getLogger("org.apache.iceberg").getLevel()) == "TRACE"

        status, body = api.handle("PUT", "/admin/loggers/sinklab.sink", {"level": "LOUD"})
        assert status == 400 and body == {"error_code": 400, "message": "Invalid log level 'LOUD'."}
        assert api.handle("GET", "/admin/loggers/no.such.logger", None)[0] == 404
    finally:
        sink_logger.setLevel(before)
        api.handle("PUT", "/admin/loggers/org.apache.iceberg", {"level": "WARN"})
