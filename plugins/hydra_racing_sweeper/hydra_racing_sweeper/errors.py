"""A user's mistake as one line: the bad value and the fix, no traceback.

The sweeper raises UserError for bad input (exit 2) and for a sweep it stops on purpose (exit 1,
e.g. too many failed trials); the Hydra plugin prints it with `exit_with`. An app may raise it
too (its errors may be this class), so one `except UserError` catches both.
"""

from __future__ import annotations

import difflib
import sys
from typing import NoReturn


class UserError(ValueError):
    """Bad input from the user (exit 2), or a sweep stopped on purpose (exit 1, e.g. too many
    failed trials): shown by `exit_with` as one line naming the value and the fix, no traceback."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self):  # picklable with its exit code (joblib returns errors across processes)
        return type(self), (str(self), self.exit_code)


def exit_with(e: UserError) -> NoReturn:
    """The one printer of a user error: `error: ...` (or `stopped: ...`), then exit."""
    print(f"{'error' if e.exit_code == 2 else 'stopped'}: {e}", file=sys.stderr)
    raise SystemExit(e.exit_code) from None


# Ctrl-C: the shell's code for SIGINT (128 + 2); a command prints one line instead of a trace
INTERRUPTED_EXIT = 130


def exit_interrupted(hint: str) -> NoReturn:
    """The one printer of a Ctrl-C: `interrupted: <hint>` (what was kept, how to go on), exit
    130."""
    print(f"interrupted: {hint}", file=sys.stderr)
    raise SystemExit(INTERRUPTED_EXIT) from None


def first_line(what: BaseException | str) -> str:
    """The first line of a message: for an exception, of str(e), or its type name when empty;
    for a text, of the text ("" when blank)."""
    text = str(what).strip()
    if text:
        return text.splitlines()[0]
    return type(what).__name__ if isinstance(what, BaseException) else ""


def did_you_mean(parent: str, key: str, candidates) -> str:
    """'did you mean parent.near? ' for the candidate closest to a misspelt key, or ''."""
    near = difflib.get_close_matches(str(key), [str(c) for c in candidates], 1)
    return f"did you mean {parent + '.' if parent else ''}{near[0]}? " if near else ""
