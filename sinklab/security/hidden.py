"""Which settings are secrets, and how one is shown anywhere sinklab writes or prints settings: a
reference as written (it is no secret, and says where the secret lives, as Kafka Connect's REST API shows
it since KAFKA-5117), a literal secret as ``[hidden]`` (as Kafka Connect's logs show a PASSWORD key)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sinklab.security.references import is_reference

HIDDEN = "[hidden]"
# By the setting's name, in Kafka's, Iceberg's and the object stores' spellings: passwords (sasl.password,
# ssl.key.password, ...), JAAS configs (they hold one), OAuth2 client credentials and tokens (iceberg.catalog.
# credential / token, s3.session-token), object store secret keys, inline private keys (Java's ssl.keystore.key,
# librdkafka's ssl.key.pem) and Authorization headers.
SECRET_KEY = re.compile(
    r"(?i)(password|secret|jaas\.config$|credential$|(^|[.\-_])token$|authorization$|private[.\-_]?key$|"
    r"keystore\.key$|api[.\-_]?key$|(^|\.)ssl\.key\.pem$)")


def is_secret(key: str) -> bool:
    return SECRET_KEY.search(key) is not None


def shown(key: str, value: Any) -> Any:
    """``value`` as it may be shown: a secret's literal hidden, a reference as written."""
    if value is None or not is_secret(key) or is_reference(value):
        return value
    return HIDDEN


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: shown(k, v) for k, v in settings.items()}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` (an error from a client, say) with every one of ``secrets`` in it replaced by ``[hidden]``."""
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text
