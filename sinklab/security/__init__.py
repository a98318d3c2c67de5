"""Secrets and the settings that carry them, below every room that talks to Kafka or the catalog.

``references``: a secret is written as a reference (``${env:NAME}``, ``${file:PATH:KEY}``,
``${directory:DIR:NAME}``, as Kafka's config providers read them) and resolved only where a client is
built. ``hidden``: which settings are secrets, and how any of them is shown (a reference as written, a
literal as ``[hidden]``). ``kafka``: one place that writes Kafka client settings in librdkafka's names (the
sink's consumer, producer and admin) or Java's (Spark's Kafka source, a Connect worker). ``refusals``: a
refused login, connection or grant as ``AccessDenied``, and the probe a client runs before it works."""

from sinklab.security.hidden import HIDDEN, is_secret, redact, scrub, shown
from sinklab.security.kafka import java_settings, librdkafka_settings
from sinklab.security.references import is_reference, properties, resolve, resolve_all
from sinklab.security.refusals import denied, probe, refused

__all__ = ["HIDDEN", "denied", "is_reference", "is_secret", "java_settings", "librdkafka_settings", "probe",
           "properties", "redact", "refused", "resolve", "resolve_all", "scrub", "shown"]
