"""Errors raised by the EVR-6 tools; all are ``TurnAuditError`` so the CLI prints one line."""

from __future__ import annotations

from turnaudit.errors import TurnAuditError


class EvaluationError(TurnAuditError):
    """Root of the EVR-6 tools' errors."""


class EvidenceFormatError(EvaluationError):
    """An evidence file, label pack or review pack is not in its fixed format."""


class ContaminatedLabelPackError(EvidenceFormatError):
    """A label pack carries auditor output (``auditor_id`` or ``observations``)."""


class DependentLabelsError(ContaminatedLabelPackError):
    """Labels name the auditor under test or carry its verdicts; ``cases`` names them."""

    def __init__(self, message: str, cases: list[str]) -> None:
        super().__init__(message)
        self.cases = cases


class UnversionedOracleError(EvidenceFormatError):
    """An ``oracle_source`` is not a named, versioned source; ``cases`` names them."""

    def __init__(self, message: str, cases: list[str]) -> None:
        super().__init__(message)
        self.cases = cases


class BundleError(EvaluationError):
    """An evidence bundle cannot be made from the given files (wrong or inconsistent input)."""


class BundleCheckError(EvaluationError):
    """An evidence bundle does not verify; ``member`` names the member that fails."""

    def __init__(self, member: str, message: str) -> None:
        super().__init__(f"{member}: {message}")
        self.member = member


class ReviewPackError(EvaluationError):
    """A manifest cannot be exported, or a review pack cannot be finalized."""


class AuditorError(EvaluationError):
    """The auditor under test could not be pinned or could not answer."""


class AuditorIdentityError(AuditorError):
    """The served model is not the pinned one (before or after the battery)."""


class AuditorUnavailableError(AuditorError):
    """The auditor's service could not be reached or answered with an HTTP error."""


class AuditorResponseError(AuditorError):
    """The auditor answered something that is neither ALARM nor OK."""


class NotReproducedError(EvaluationError):
    """Evidence rebuilt from the stream disagrees with what the live worker recorded."""
