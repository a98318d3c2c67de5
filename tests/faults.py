"""The fault injector the suite puts between a sink and the REST catalog or the S3 server. It lives in
``sinklab.stack.faults`` (bench/soak.py uses it too); the tests import it from here, as before."""

from sinklab.stack.faults import (
    FaultProxy,
    Match,
    Request,
    everything,
    injected,
    kill,
    leader,
    publishes,
    writes,
)

__all__ = ["FaultProxy", "Match", "Request", "everything", "injected", "kill", "leader", "publishes", "writes"]
