"""Fresh reads: a table as a sink committed it, plus what that sink has not committed yet, each record once.

Every snapshot a sink publishes records the Kafka offsets it covers (``sinklab.offsets``), and the sink
converts records with Spark expressions. So a read pins the table at its head snapshot S, takes from
Kafka (read_committed) each source partition's records from S's offsets to the partition's last stable
offset now (the *watermark*), converts them as the sink does, routes them as it does, and adds them to
S: no record twice (S holds nothing past its offsets), none missing (the tail starts where S ends),
whatever the sink is doing meanwhile. docs/fresh-reads.md tells the whole guarantee and its cost.

    from sinklab import fresh
    fresh.read(stack, "rpc.pizzas").df.groupBy("store_id").count()
    fresh.view(stack, "rpc.pizzas", "pizzas_fresh")  # then: SELECT ... FROM pizzas_fresh
"""

from sinklab.fresh.snapshot_and_tail import FreshRead, Reader, read, view

__all__ = ["FreshRead", "Reader", "read", "view"]
