"""What makes the sink exactly-once: one commit cycle, a file a step (docs/protocol.md).

``plan`` (which offset ranges a cycle reads) -> ``worker`` (the data side: the records read, converted
and routed, each table's rows staged as a snapshot no one sees yet) -> ``publish`` (each table by
compare-and-swap) -> ``channel`` (the Kafka transaction: the fence, the control events, the group's
offsets). ``coordinator`` runs them in that order, ``recovery`` is what a restart finds, and ``pace``
chooses when the next cycle starts."""

from sinklab.sink.cycle.coordinator import CycleResult
from sinklab.sink.cycle.pace import fit
from sinklab.sink.cycle.plan import Planner
from sinklab.sink.cycle.worker import Worker

__all__ = ["CycleResult", "Planner", "Worker", "fit"]
