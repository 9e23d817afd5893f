"""A run's failure narrowed to the files that cause it; the warehouse's own failures told apart."""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa

from kwarehouse.build.sources import Source
from kwarehouse.errors import InputError, KwhError, SchemaError, display_path, first_line, internal_error

log = logging.getLogger(__name__)


def warehouse_fault(exc: BaseException) -> bool:
    """Whether a failure while building or storing a run is the warehouse's (disk full, catalog gone, a
    lock: the ingest stops) rather than the run's files' (a bad file, a reader's or normalization's bug,
    rows that do not fit the schema: those files fail alone)."""
    if isinstance(exc, (InputError, SchemaError)):
        return False
    return isinstance(exc, (KwhError, MemoryError, OSError, sa.exc.DatabaseError)) or not isinstance(exc, Exception)


def file_error(members: list[Source], exc: BaseException, doing: str | None = None) -> str:
    """The one-line error of files whose run could not be built or stored."""
    if isinstance(exc, InputError):
        return str(exc)
    log.debug("building the run of %s failed", _files_of(members), exc_info=exc)
    return internal_error(_files_of(members), exc,
                          doing or ("building its run" if len(members) == 1 else "building their run"))


def isolated(members: list[Source], attempt: Callable[[list[Source]], object],
             check: Callable[[Source], None], failed: list[str]):
    """attempt(members) (build and store a run), with a failure narrowed to the files that cause it.

    A run has several files (the pages of one report). When attempt fails for a reason of the files
    (not warehouse_fault: those are raised), each file is checked alone (check raises what building it
    alone raises); the run is then attempted again with the files that pass, and each other file gets
    its own error line in `failed`. Returns attempt's answer, or None when nothing was stored."""
    try:
        return attempt(members)
    except Exception as exc:   # noqa: BLE001 - sorted below: a warehouse's failure is raised again
        if warehouse_fault(exc):
            raise
        first = exc
    if len(members) == 1:
        failed.append(file_error(members, first))
        return None
    good, bad = [], []
    for member in members:
        try:
            check(member)
        except Exception as exc:   # noqa: BLE001 - as above
            if warehouse_fault(exc):
                raise
            bad.append((member, exc))
        else:
            good.append(member)
    # one line per distinct error: files that fail for one reason (their folder's manifest) say it once
    failed.extend(dict.fromkeys(file_error([member], exc) for member, exc in bad))
    if not bad:
        failed.append(file_error(members, first, "building their run together (each alone builds)"))
        return None
    if not good:
        return None
    try:
        return attempt(good)
    except Exception as exc:   # noqa: BLE001 - as above
        if warehouse_fault(exc):
            raise
        failed.append(file_error(good, exc))
        return None


def one_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message (for errors kwh did not foresee)."""
    text = first_line(exc, 200)
    return text if text == type(exc).__name__ else f"{type(exc).__name__}: {text}"


def _files_of(members: list[Source]) -> str:
    return ", ".join(display_path(m.result.path) for m in members)
