"""Secrets by reference, in the syntax of Kafka's config providers, so that one value works in a sinklab
config and in a Kafka Connect worker that has the providers configured:

- ``${env:NAME}``: an environment variable (Kafka's ``EnvVarConfigProvider``);
- ``${file:PATH:KEY}``: a key of a Java properties file (``FileConfigProvider``);
- ``${directory:DIR:NAME}``: a whole file's content, trailing newline kept off (``DirectoryConfigProvider``,
  as a Kubernetes secret is mounted).

A reference is what gets stored and shown (stack.json, a connector's config, ``sink status``); the value
it names exists only in the clients built from it."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sinklab.exceptions import SecretReferenceError

REFERENCE = re.compile(r"\$\{(env|file|directory):([^}]*)\}")


def is_reference(value: object) -> bool:
    return isinstance(value, str) and REFERENCE.search(value) is not None


def resolve(value: str, key: str | None = None) -> str:
    """``value`` with each reference replaced by what it names; ``key``, the setting it is the value of,
    names it in an error (which never shows a resolved value)."""
    return REFERENCE.sub(lambda m: _lookup(m.group(1), m.group(2), m.group(0), key), value)


def resolve_all(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with every text value resolved."""
    return {k: resolve(v, k) if isinstance(v, str) else v for k, v in settings.items()}


def _lookup(provider: str, body: str, reference: str, key: str | None) -> str:
    if provider == "env":
        if body not in os.environ:
            raise SecretReferenceError(key, reference, "the environment variable is not set")
        return os.environ[body]
    path, sep, name = body.rpartition(":")
    if not sep or not path or not name:
        what = "KEY" if provider == "file" else "NAME"
        raise SecretReferenceError(key, reference, f"write it as ${{{provider}:PATH:{what}}}")
    try:
        if provider == "directory":
            return (Path(path) / name).read_text().removesuffix("\n")
        values = properties(Path(path).read_text())
    except OSError as e:
        raise SecretReferenceError(key, reference, f"cannot read it ({e.strerror})") from None
    if name not in values:
        raise SecretReferenceError(key, reference, f"{path} has no key {name}")
    return values[name]


def properties(text: str) -> dict[str, str]:
    """A Java properties file's keys and values (``key=value``, ``key: value``; ``#`` and ``!`` comments;
    a trailing backslash continues a line)."""
    out: dict[str, str] = {}
    logical = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        if not logical and (not stripped or stripped[0] in "#!"):
            continue
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            logical += stripped[:-1]
            continue
        logical += stripped
        match = re.match(r"((?:\\.|[^=:\s])+)\s*[=:\s]\s*(.*)$", logical)
        if match:
            out[match.group(1).replace("\\", "")] = match.group(2)
        elif logical:
            out[logical] = ""
        logical = ""
    return out
