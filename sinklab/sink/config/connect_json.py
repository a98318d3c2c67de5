"""A connector's JSON as Kafka Connect users keep it: ``{"name": ..., "config": {...}}`` or the flat map, in
a file of its own (a bare name is also looked up among the configs sinklab ships, the seed's), read into
the connector's name and its flat config map, unvalidated (``sink_config.from_connect`` reads the keys)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sinklab.exceptions import ConfigError


def read_connect_json(source: str | Path | dict[str, Any], name: str | None = None) -> tuple[str, dict[str, Any]]:
    """The connector's name and its flat config map, from either Connect JSON shape (unvalidated)."""
    if isinstance(source, dict):
        raw = source
        origin = "<dict>"
    else:
        path = config_path(source)
        origin = str(path)
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(None, f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ConfigError(None, f"{origin}: expected a JSON object")
    if "config" in raw and isinstance(raw["config"], dict):
        conf = dict(raw["config"])
        name = name or raw.get("name") or conf.get("name")
    else:
        conf = dict(raw)
        name = name or conf.get("name")
    if not name and not isinstance(source, dict):
        # The seed posts pizzas-on-ice.json to /connectors/pizzas-on-ice: the file names the connector.
        name = Path(source).stem.replace("_", "-")
    if not name:
        raise ConfigError("name", "a sink needs a name (it keys the consumer group and the transactional id)")
    return str(name), conf


def packaged_configs() -> dict[str, Path]:
    """The configs shipped in ``sinklab/configs`` (the seed's), by file name."""
    folder = Path(__file__).resolve().parents[2] / "configs"
    return {p.name: p for p in sorted(folder.glob("*.json"))}


def config_path(source: str | Path) -> Path:
    """The config file ``source`` names; a bare name that is not a file here is looked up among the
    packaged configs, so ``--config pizzas-on-ice.json`` works from any directory."""
    path = Path(source)
    if path.is_file():
        return path
    packaged = packaged_configs()
    if path.name == str(source) and path.name in packaged:
        return packaged[path.name]
    if path.exists():
        raise ConfigError(None, f"{path.resolve()}: not a file")
    raise ConfigError(None, f"config file {path.resolve()} not found (a bare name is also looked up among sinklab's "
                      f"packaged configs: {', '.join(packaged) or 'none'})")
