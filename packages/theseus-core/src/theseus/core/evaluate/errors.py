"""Errors of the evaluations (one line each, exit code 2)."""

from theseus.core.errors import TheseusError


class EvaluationError(TheseusError):
    """An evaluation cannot run: unknown task, missing data, nothing to evaluate."""
