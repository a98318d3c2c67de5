"""How a cycle's offset ranges are dealt into Spark read tasks (pure logic)."""

from __future__ import annotations

from sinklab.sink.reader import OffsetRange, plan_tasks


def _covered(tasks: list[list[OffsetRange]]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for task in tasks:
        for r in task:
            out.setdefault((r.topic, r.partition), []).append((r.start, r.end))
    return {k: sorted(v) for k, v in out.items()}


def test_every_offset_is_read_exactly_once_in_equal_tasks() -> None:
    ranges = [OffsetRange("t", 0, 0, 70_000), OffsetRange("t", 1, 100, 30_100), OffsetRange("u", 0, 5, 6)]
    tasks = plan_tasks(ranges, parallelism=2, min_task=1_000)
    assert len(tasks) == 2
    sizes = [sum(r.size for r in task) for task in tasks]
    assert sum(sizes) == 100_001 and max(sizes) - min(sizes) <= 1
    covered = _covered(tasks)
    # Contiguous pieces, no gap, no overlap.
    for (topic, partition), pieces in covered.items():
        whole = next(r for r in ranges if (r.topic, r.partition) == (topic, partition))
        assert pieces[0][0] == whole.start and pieces[-1][1] == whole.end
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
    assert set(covered) == {("t", 0), ("t", 1), ("u", 0)}


def test_a_small_cycle_is_one_task_and_an_empty_one_none() -> None:
    ranges = [OffsetRange("t", p, 0, 10) for p in range(6)]
    assert [len(t) for t in plan_tasks(ranges, parallelism=8)] == [6]
    assert plan_tasks([OffsetRange("t", 0, 3, 3)], parallelism=2) == []


def test_never_more_tasks_than_cores() -> None:
    ranges = [OffsetRange("t", p, 0, 1_000_000) for p in range(6)]
    assert len(plan_tasks(ranges, parallelism=2)) == 2
    assert len(plan_tasks(ranges, parallelism=4)) == 4
