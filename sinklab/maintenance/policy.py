"""When a running sink maintains its tables: the ``sinklab.maintenance.*`` keys of its config."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from sinklab.exceptions import PolicyError
from sinklab.sink.config import keys

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(key: str, value: Any) -> int:
    """``500ms``, ``30s``, ``10m``, ``2h``, ``7d`` or a plain number of milliseconds, as milliseconds."""
    match = DURATION_RE.match(str(value))
    if match is None:
        raise PolicyError(key, f"expected a duration such as 30s, 10m, 2h, 7d or milliseconds, got {value!r}")
    return int(match.group(1)) * UNITS_MS[match.group(2) or "ms"]


class MaintenancePolicy(BaseModel):
    """What the sink runs between cycles on the tables it writes. Everything is off by default; the key
    setting each field, and what it means, is in ``sinklab.sink.keys.MAINTENANCE_KEYS``."""

    compact_every_commits: int = 0  # compact a table after every N of its commits
    compact_small_files: int = 0  # ... or as soon as one of its partitions holds more than M small files
    target_file_size_bytes: int | None = None  # default: the table's write.target-file-size-bytes
    rewrite_manifests: bool = True  # after each compaction
    expire_older_than_ms: int | None = None  # expire snapshots older than this (recovery's are kept)
    expire_retain_last: int = 1
    expire_every_commits: int = 0  # expire also without compaction (default: with each compaction)
    orphans_older_than_ms: int | None = None  # with each expiry: orphan files and dead staging branches this old

    @property
    def enabled(self) -> bool:
        return bool(self.compact_every_commits or self.compact_small_files or self.expire_every_commits)


# Each key's type says how it is read: BOOLEAN true/false, STRING a duration, INT/LONG a count or size.
KEYS = {k.name: k for k in keys.MAINTENANCE_KEYS}


def parse_policy(conf: dict[str, Any]) -> MaintenancePolicy:
    """The policy from a sink's flat config map (only its ``sinklab.maintenance.*`` keys are read)."""
    values: dict[str, Any] = {}
    for key, raw in conf.items():
        if not key.startswith(keys.MAINTENANCE_PREFIX):
            continue
        decl = KEYS.get(key)
        if decl is None:
            raise PolicyError(key, f"unknown maintenance key (known: {', '.join(KEYS)})")
        text = str(raw).strip()
        if decl.type == "STRING":
            values[decl.field] = parse_duration(key, text)
        elif decl.type == "BOOLEAN":
            if text.lower() not in ("true", "false"):
                raise PolicyError(key, f"expected true or false, got {raw!r}")
            values[decl.field] = text.lower() == "true"
        else:
            if not text.isdigit():
                raise PolicyError(key, f"expected a non-negative integer, got {raw!r}")
            values[decl.field] = int(text)
    policy = MaintenancePolicy(**values)
    if policy.expire_every_commits and policy.expire_older_than_ms is None:
        raise PolicyError(keys.EXPIRE_EVERY_COMMITS, f"set {keys.EXPIRE_OLDER_THAN} too (how old a snapshot must be "
                          "to go)")
    if policy.orphans_older_than_ms is not None and policy.expire_older_than_ms is None:
        raise PolicyError(keys.ORPHANS_OLDER_THAN, "orphan files are cleaned with each expiry; set "
                          f"{keys.EXPIRE_OLDER_THAN} too")
    if policy.expire_older_than_ms is not None and not policy.enabled:
        raise PolicyError(keys.EXPIRE_OLDER_THAN, f"say when to expire: {keys.EXPIRE_EVERY_COMMITS}, or with "
                          f"each compaction ({keys.COMPACT_EVERY_COMMITS} / compact.small-files)")
    return policy
