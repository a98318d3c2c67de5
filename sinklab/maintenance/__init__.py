"""Table maintenance beside a running sink: compaction, snapshot expiry, orphan files.

    from sinklab.maintenance import Target, maintain
    for report in maintain(Target.on(stack, "rpc.pizzas"), expire_older_than_ms=3_600_000):
        print(report)

Each operation is a plain function over a :class:`Target`; a sink runs them between its cycles
when its config has ``sinklab.maintenance.*`` keys (:mod:`sinklab.maintenance.policy`).
"""

from __future__ import annotations

import importlib
from typing import Any

from sinklab.maintenance.policy import MaintenancePolicy, PolicyError, parse_duration, parse_policy

# The operations need the sink's table code, whose config needs the policy: loaded on first use, so
# that reading a sink config does not import them in the middle of its own import.
_OPERATIONS = {"DEFAULT_EXPIRE_MS", "DEFAULT_ORPHAN_MS", "Report", "Target", "clean", "compact", "expire",
               "maintain", "rewrite_manifests"}


def __getattr__(name: str) -> Any:
    if name in _OPERATIONS:
        return getattr(importlib.import_module("sinklab.maintenance.operations"), name)
    raise AttributeError(f"module 'sinklab.maintenance' has no attribute {name!r}")


__all__ = ["MaintenancePolicy", "PolicyError", "parse_duration", "parse_policy", *sorted(_OPERATIONS)]
