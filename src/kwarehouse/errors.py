"""Every error kwh reports to a user derives from KwhError; the CLI prints it as one line."""

from __future__ import annotations

from pathlib import Path


class KwhError(Exception):
    """An error with a message meant for the user: what went wrong and what to do."""


class InputError(KwhError):
    """A file that cannot be ingested: names the file, the line when known, and the fix."""

    def __init__(self, path: Path | str, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")
