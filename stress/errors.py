"""Errors a user can cause. The CLI turns each into one line and exit code 2, never a traceback."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: unknown target, filter matching nothing, missing file, unusable driver..."""

    exit_code: int = 2
