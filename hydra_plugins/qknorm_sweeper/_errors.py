"""The one error a sweep reports to the user."""

from __future__ import annotations


class UserError(ValueError):
    """Bad sweeper input (exit 2), or a sweep stopped on purpose (exit 1). The console gets the
    message as one line, no traceback; it names the value and the fix."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
