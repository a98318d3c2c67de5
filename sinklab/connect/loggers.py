"""Kafka Connect's ``/admin/loggers``: log levels of this process, changed without a restart.

Connect names log4j loggers and levels. Here a name is a Python logger (sinklab's own, ``root``) and,
when a Spark driver runs in this process, also that JVM's log4j2 logger of the same name
(``org.apache.spark``, ``org.apache.iceberg``): a level set through the API reaches both.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sinklab.exceptions import BadRequest, NotFound

# log4j's levels, as Connect takes and shows them, and the Python level each stands for.
LEVELS = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
          "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": 5}
ROOT = "root"
OWN = "sinklab"

_modified: dict[str, int] = {}  # logger -> when this API last set it (ms), as Connect reports


def _name_of(level: int) -> str:
    """The highest log4j level at or below a Python one (Python has levels log4j lacks)."""
    at_or_below = [n for n in sorted(LEVELS, key=LEVELS.__getitem__) if LEVELS[n] <= level]
    return at_or_below[-1] if at_or_below else "TRACE"


def _python(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


def _known() -> list[str]:
    """Loggers with a level of their own: root, sinklab's, and whatever this API set."""
    names = {ROOT, OWN, *_modified}
    names.update(n for n, lg in logging.root.manager.loggerDict.items()
                 if isinstance(lg, logging.Logger) and lg.level != logging.NOTSET
                 and (n == OWN or n.startswith(f"{OWN}.")))
    return sorted(names)


def _entry(name: str) -> dict[str, Any]:
    return {"level": _name_of(_python(name).getEffectiveLevel()), "last_modified": _modified.get(name)}


def list_levels() -> dict[str, dict[str, Any]]:
    return {name: _entry(name) for name in _known()}


def get_level(name: str) -> dict[str, Any]:
    if name not in _known() and name not in logging.root.manager.loggerDict:
        raise NotFound(f"Logger {name} not found.")
    return _entry(name)


def set_level(name: str, level: Any) -> list[str]:
    """Set ``name`` (and so everything below it) to ``level``; the loggers whose level changed."""
    text = str(level or "").upper()
    if text not in LEVELS:
        raise BadRequest(f"Invalid log level '{level}'.")
    _python(name).setLevel(LEVELS[text])
    _set_in_jvm(name, text)
    _modified[name] = int(time.time() * 1000)
    below = [n for n in logging.root.manager.loggerDict if name == ROOT or n.startswith(f"{name}.")]
    for child in below:
        _python(child).setLevel(logging.NOTSET)  # they follow the level just set
    return sorted({name, *below})


def _set_in_jvm(name: str, level: str) -> None:
    """The same level in this process's Spark driver JVM (log4j2), when one runs."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is None:
        return
    jvm = context._jvm  # type: ignore[attr-defined]
    log4j = jvm.org.apache.logging.log4j
    target = log4j.LogManager.ROOT_LOGGER_NAME if name == ROOT else name
    log4j.core.config.Configurator.setLevel(target, log4j.Level.toLevel(level))
