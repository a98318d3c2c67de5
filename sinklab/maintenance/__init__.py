"""Table maintenance beside a running sink: compaction, snapshot expiry, orphan files.

    from sinklab.maintenance import Target, maintain
    for report in maintain(Target.on(stack, "rpc.pizzas"), expire_older_than_ms=3_600_000):
        print(report)

Each operation is a plain function over a :class:`Target`; a sink runs them between its cycles per
its config's ``sinklab.maintenance.*`` keys when given the hook ``schedule(config)``
(:mod:`sinklab.maintenance.schedule`); beside another sink (Apache's), ``Follower`` runs the same policy as
that sink's commits come (:mod:`sinklab.maintenance.follow`), and cleaning keeps what it has in flight.
"""

from __future__ import annotations

from sinklab.exceptions import PolicyError
from sinklab.maintenance.follow import Follower, follow
from sinklab.maintenance.operations import (
    DEFAULT_EXPIRE_MS,
    DEFAULT_ORPHAN_MS,
    Report,
    Target,
    clean,
    compact,
    expire,
    maintain,
    rewrite_manifests,
)
from sinklab.maintenance.policy import MaintenancePolicy, parse_duration, parse_policy
from sinklab.maintenance.schedule import Scheduler, schedule

__all__ = ["DEFAULT_EXPIRE_MS", "DEFAULT_ORPHAN_MS", "Follower", "MaintenancePolicy", "PolicyError", "Report",
           "Scheduler", "Target", "clean", "compact", "expire", "follow", "maintain", "parse_duration", "parse_policy",
           "rewrite_manifests", "schedule"]
