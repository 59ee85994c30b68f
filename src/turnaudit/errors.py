"""The project's exceptions: one root, so callers can catch everything we raise."""

from __future__ import annotations


class TurnAuditError(Exception):
    """Root of every error this package raises on purpose."""


class ConfigurationError(TurnAuditError):
    """A setting, environment variable or CLI argument is wrong."""


class StorageError(TurnAuditError):
    """The archive's object storage did not answer, or failed a request (exit 1)."""


class SerializationError(TurnAuditError):
    """A record could not be encoded, or a message could not be decoded."""


class UnknownFramingError(SerializationError):
    """The message is in neither the single-object nor the Confluent framing."""


class SchemaNotFoundError(SerializationError):
    """The message names a writer schema (fingerprint or registry id) no reader knows."""


class SchemaCompatibilityError(TurnAuditError):
    """Two shipped schema versions cannot read each other's data."""


class ContractViolationError(TurnAuditError):
    """An event breaks one of the pipeline's contracts (PIPELINE.md, contracts 1-5)."""

    def __init__(self, breaches: list[str]) -> None:
        super().__init__("; ".join(breaches))
        self.breaches = breaches


class BrokerError(TurnAuditError):
    """The local broker could not be set up, started or stopped."""


class MissingToolError(BrokerError):
    """A program the local broker needs (java, mvn) is not installed."""


class PublishError(TurnAuditError):
    """Events could not be handed to Kafka nor kept in the spool."""


class SpoolFullError(PublishError):
    """The on-disk spool reached its bound; the event was not accepted."""


class SpoolWriteError(PublishError):
    """The spool's disk refused a write (full, read-only, I/O error); nothing was kept."""


class EventRefusedError(PublishError):
    """``publish()`` did not accept the event: it is neither on its way nor spooled.

    The refusal is already counted (``stats().refused``, the refused metric) and
    logged; ``event_id`` and ``sequence`` are the identity the event was given
    (the session's sequence shows the gap), ``reason`` a closed-set word:
    ``spool_full`` or ``disk_error``.
    """

    def __init__(self, message: str, *, event_id: str, sequence: int, reason: str) -> None:
        super().__init__(message)
        self.event_id = event_id
        self.sequence = sequence
        self.reason = reason


class RegistryUnavailableError(PublishError):
    """The schema registry did not give the writer schemas their ids."""


class IncompatibleSchemaError(RegistryUnavailableError):
    """The schema registry refused a writer schema: it breaks the subject's compatibility
    level (an earlier version under the subject cannot read it, or it cannot read one)."""


class LocalRegistryError(BrokerError):
    """The local schema registry (``turnaudit registry``) could not be set up, started
    or stopped."""


class BrokerUnreachableError(BrokerError):
    """No broker of the cluster answered within the time allowed."""


class AccessDeniedError(BrokerError):
    """The cluster refused who the client is (authentication, TLS trust) or what
    it asked (an ACL): ``turnaudit`` exits 3 with the reason."""
