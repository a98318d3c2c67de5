"""Connectors as code: a folder of connector JSON files is the desired state of a Connect server.

``plan`` compares the folder with the server (pure: the unit tests feed it dicts); ``apply`` PUTs
what differs and reports created / updated / unchanged, deleting nothing unless ``prune``; ``diff``
prints the same plan without changing anything, so a CI job on a pull request can fail when the
server and the folder disagree. Configs are compared as Connect stores them (every value a string,
``name`` included), so ``180000`` in a file equals ``"180000"`` on the server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from sinklab.connect.herder import normalize, validate
from sinklab.exceptions import ApplyError, ConfigError, ConnectError
from sinklab.security import HIDDEN
from sinklab.sink.config import read_connect_json

TIMEOUT_S = 90  # Kafka Connect's own REST timeout: a DELETE waits for its sink's running cycle


@dataclass
class Change:
    name: str
    action: str  # create, update, unchanged, delete, keep (on the server only, no --prune)
    source: str | None = None  # the file it comes from
    keys: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # key, server's, folder's

    @property
    def changes(self) -> bool:
        return self.action in ("create", "update", "delete")


def read_folder(folder: str | Path) -> dict[str, tuple[dict[str, str], str]]:
    """Every ``*.json`` of the folder as ``name -> (config as Connect stores it, file name)``, each
    validated as the server would (a CI check catches a bad config before anything is applied)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ApplyError(f"{folder}: not a folder of connector JSON files")
    out: dict[str, tuple[dict[str, str], str]] = {}
    for path in sorted(folder.glob("*.json")):
        try:
            name, conf = read_connect_json(path)
            config = normalize(name, conf)
            validate(name, config)
        except (ConfigError, ConnectError) as exc:
            raise ApplyError(f"{path.name}: {exc}") from None
        if name in out:
            raise ApplyError(f"{path.name}: connector {name!r} is also defined in {out[name][1]}")
        out[name] = (config, path.name)
    return out


def plan(desired: dict[str, tuple[dict[str, str], str]], current: dict[str, dict[str, str]],
         prune: bool = False) -> list[Change]:
    changes = []
    for name, (config, source) in sorted(desired.items()):
        if name not in current:
            changes.append(Change(name, "create", source))
            continue
        old = current[name]
        # A literal secret is [hidden] in the server's answer: not a change (a reference is shown as it is).
        keys = [(k, old.get(k), config.get(k)) for k in sorted(old.keys() | config.keys())
                if old.get(k) != config.get(k) and not (old.get(k) == HIDDEN and config.get(k) is not None)]
        changes.append(Change(name, "update" if keys else "unchanged", source, keys))
    for name in sorted(current.keys() - desired.keys()):
        changes.append(Change(name, "delete" if prune else "keep"))
    return changes


class ConnectClient:
    """The few calls ``apply`` makes, with Connect's error body turned into a message."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None):
        self.url = url.rstrip("/")
        self.auth = auth  # the server's basic-auth login (a secure stack's StackInfo.connect_auth())

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            response = requests.request(method, self.url + path, timeout=TIMEOUT_S, auth=self.auth, **kwargs)
        except requests.RequestException as exc:
            raise ApplyError(f"no Connect server answers at {self.url} ({type(exc).__name__})") from None
        if response.status_code >= 400:
            try:
                message = response.json().get("message", response.text)
            except ValueError:
                message = response.text
            raise ApplyError(f"{method} {path}: {response.status_code} {message}")
        return response

    def configs(self) -> dict[str, dict[str, str]]:
        expanded = self._call("GET", "/connectors", params={"expand": "info"}).json()
        return {name: dict(entry["info"]["config"]) for name, entry in expanded.items()}

    def put_config(self, name: str, config: dict[str, str]) -> int:
        return self._call("PUT", f"/connectors/{requests.utils.quote(name, safe='')}/config", json=config).status_code

    def delete(self, name: str) -> None:
        self._call("DELETE", f"/connectors/{requests.utils.quote(name, safe='')}")


def describe(change: Change) -> list[str]:
    """A change as ``diff`` prints it."""
    if change.action == "create":
        return [f"+ {change.name}  (new, from {change.source})"]
    if change.action == "delete":
        return [f"- {change.name}  (deleted: not in the folder)"]
    if change.action == "keep":
        return [f"  {change.name}  (only on the server; kept, apply --prune deletes it)"]
    if change.action == "unchanged":
        return [f"= {change.name}  (unchanged)"]
    lines = [f"~ {change.name}  (from {change.source})"]
    for key, old, new in change.keys:
        if old is None:
            lines.append(f"    + {key}: {new!r}")
        elif new is None:
            lines.append(f"    - {key}: {old!r}")
        else:
            lines.append(f"    ~ {key}: {old!r} -> {new!r}")
    return lines


def diff(url: str, folder: str | Path, prune: bool = False, echo: Callable[[str], None] = print,
         auth: tuple[str, str] | None = None) -> list[Change]:
    changes = plan(read_folder(folder), ConnectClient(url, auth).configs(), prune)
    for change in changes:
        for line in describe(change):
            echo(line)
    return changes


def apply(url: str, folder: str | Path, prune: bool = False, echo: Callable[[str], None] = print,
          auth: tuple[str, str] | None = None) -> list[Change]:
    """PUT every new or changed connector (an update restarts it on the new config); with ``prune``,
    DELETE the server's connectors that the folder does not define."""
    client = ConnectClient(url, auth)
    desired = read_folder(folder)
    changes = plan(desired, client.configs(), prune)
    failures = []
    for change in changes:
        try:
            if change.action in ("create", "update"):
                status = client.put_config(change.name, desired[change.name][0])
                # The server's answer, not the plan, says what happened (someone may have raced us).
                change.action = "create" if status == 201 else "update"
            elif change.action == "delete":
                client.delete(change.name)
        except ApplyError as exc:
            failures.append(f"{change.name}: {exc}")
            echo(f"failed     {change.name}: {exc}")
            continue
        label = {"create": "created", "update": "updated", "unchanged": "unchanged", "delete": "deleted",
                 "keep": "kept"}[change.action]
        detail = f"  ({', '.join(k for k, _, _ in change.keys)})" if change.action == "update" else ""
        echo(f"{label:10s} {change.name}{detail}")
    if failures:
        raise ApplyError(f"{len(failures)} connector(s) not applied:\n  " + "\n  ".join(failures))
    return changes
