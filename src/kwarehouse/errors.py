"""Every error kwh reports to a user derives from KwhError; the CLI prints it as one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

# C0 and C1 control characters and DEL: a newline in a file name would split a one-line error.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` as one line of valid UTF-8: control characters and lone surrogates become backslash
    escapes (`\\n`, `\\x00`, `\\udcff`); everything else is unchanged.

    >>> printable("a\\nb\\udcff")
    'a\\\\nb\\\\udcff'
    """
    text = _CONTROL.sub(lambda m: _NAMED_ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def display_path(path: os.PathLike | str | bytes) -> str:
    """A path as text that is always one line of valid UTF-8, for messages and for the warehouse's
    source_files/source_dir columns. A file name with bytes that are not UTF-8 (Python holds them
    as surrogate escapes) shows them as `\\xNN`; control characters are escaped too. A path that is
    valid UTF-8 and has no control characters comes back as str(path).

    >>> display_path(os.fsdecode(b"runs/gpt2-\\xff.raw.csv"))
    'runs/gpt2-\\\\xff.raw.csv'
    """
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:     # a str with a lone surrogate that no file-system byte stands for
        return printable(str(path))
    return printable(raw.decode("utf-8", "backslashreplace"))


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (of the driver's own error for a wrapped database
    error), or its type's name when it has none: what a one-line error quotes."""
    text = str(getattr(exc, "orig", None) or exc)
    return (text.splitlines() or [type(exc).__name__])[0][:limit]


class KwhError(Exception):
    """An error with a message meant for the user: what went wrong and what to do."""


class InputError(KwhError):
    """A file that cannot be ingested: names the file, the line when known, and the fix.
    The path is shown with display_path and the message with printable, so the error is always
    one line of valid UTF-8 whatever the file's name or content."""

    def __init__(self, path: Path | str | bytes, message: str, line: int | None = None):
        self.path = display_path(path)
        self.line = line
        self.message = printable(message)
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {self.message}")

    def __reduce__(self):
        # Crosses process boundaries (kwh ingest --jobs) with its fields, not just its text.
        return (InputError, (self.path, self.message, self.line))


class SchemaError(KwhError):
    """Rows that do not fit the warehouse's schema (a NULL in a NOT NULL column, a column missing or of
    the wrong type): a bug in kwh's reading or normalizing of some file, never the warehouse's state.
    An ingest turns it into that file's one-line error and stores the other files."""


def internal_error(files: str, exc: BaseException, doing: str) -> str:
    """The one-line error for a failure kwh did not foresee while `doing` something with `files`
    (display paths): what happened, that nothing of them was stored, and to report it.

    >>> internal_error("runs/a.csv", ValueError("bad value"), "reading it")
    'runs/a.csv: internal error while reading it (ValueError: bad value); nothing of it was stored, the other files are not affected: please report this with the file'
    """
    text = first_line(exc, 200)
    what = text if text == type(exc).__name__ else f"{type(exc).__name__}: {text}"
    them = "them" if ", " in files else "it"
    return (f"{files}: internal error while {doing} ({printable(what)}); nothing of {them} was stored, the other "
            f"files are not affected: please report this with the file")


class NothingToStore(InputError):
    """A capture that is what it claims to be but legitimately holds no CUDA data (nsys of a CPU-only
    run, a trace without GPU events, an ncu run that profiled no kernel): not a failure. Ingest
    records it in the catalog with this reason, and later ingests skip it."""

    def __reduce__(self):
        return (NothingToStore, (self.path, self.message, self.line))
