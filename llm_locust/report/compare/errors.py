"""The error that stops a comparison (its subclass WeightsError: weights.py)."""

from __future__ import annotations


class CompareError(ValueError):
    """Input that stops the comparison (a clear message; the command exits 2, writes nothing)."""
