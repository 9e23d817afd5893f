"""The locks a writer holds, and what is refused before anything is written.

One writer at a time holds the warehouse's writer lock (layout.WRITER_LOCK, an flock on a file in the
folder; the file names its holder for those who wait). A new warehouse's catalog is created under a
lock of its own (layout.CATALOG_LOCK): the same process may hold the writer lock later.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from kwarehouse import schema
from kwarehouse.errors import KwhError
from kwarehouse.store.layout import CATALOG_LOCK, FILES, WRITER_LOCK, WRITTEN_FILES, WRITTEN_FOLDERS

# How often a writer waiting for another's lock looks again.
LOCK_POLL_SECONDS = 0.2


@contextlib.contextmanager
def hold(root: Path, name: str, purpose: str, wait: float | None, warn: Callable[[str], None]):
    """Hold the lock file `name` of `root`; a wait is said through `warn` (who holds it) and lasts at
    most `wait` seconds (None: as long as it takes)."""
    path = root / name
    try:
        handle = open(path, "a+")
    except OSError as exc:
        raise KwhError(f"{root}: cannot take the {purpose} lock ({exc.strerror}); "
                       "is the warehouse read-only? Reading commands still work") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another kwh process"
            limit = "" if wait is None else f" (at most {wait:g} s: --wait)"
            warn(f"waiting for the {purpose} lock of {root}, held by {holder}{limit}")
            deadline = None if wait is None else time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise KwhError(f"{root}: gave up after {wait:g} s waiting for the {purpose} "
                                       f"lock, held by {holder}; try again later or raise --wait") from None
                    time.sleep(LOCK_POLL_SECONDS)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} ({' '.join(sys.argv[:2]) or 'python'}) since "
                         f"{datetime.now().isoformat(timespec='seconds')}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def hold_if_free(root: Path):
    """Yields True holding the writer lock when no writer holds it, else False at once (readers that
    would rebuild a stale warehouse.duckdb do so only then). OSError: a read-only folder."""
    with open(root / WRITER_LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def wait_for_creation(root: Path) -> None:
    """Return once no process is creating the warehouse's catalog (its creation lock is free);
    OSError where the folder is read-only or missing (then nobody is creating it)."""
    with open(root / CATALOG_LOCK, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        fcntl.flock(handle, fcntl.LOCK_UN)


def _subfolders(folder: Path) -> list[Path]:
    """The folders (and links) in `folder`; none when it is missing or not a folder."""
    try:
        with os.scandir(folder) as entries:
            return [Path(e.path) for e in entries if e.is_symlink() or e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def links(root: Path) -> list[Path]:
    """The folders and files kwh writes into that are symbolic links (see WRITTEN_FOLDERS)."""
    found = [root / name for name in (*WRITTEN_FOLDERS, *WRITTEN_FILES) if (root / name).is_symlink()]
    for top in (root, root / FILES):
        if top.is_symlink():
            continue        # named above
        for table in schema.tables():
            folder = top / table
            if folder.is_symlink():
                found.append(folder)
                continue
            # model=<m> folders, and gpu=<g> folders in them: directories only, never the files
            for model in _subfolders(folder):
                if model.is_symlink():
                    found.append(model)
                    continue
                found += [gpu for gpu in _subfolders(model) if gpu.is_symlink()]
    return found


def refuse_links(root: Path) -> None:
    """Refuse to write (before anything is written) where a folder or file kwh writes into is a
    symbolic link: kwh's files would land, or be deleted, wherever it points. Reading through
    such a link still works."""
    found = links(root)
    if found:
        link = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise KwhError(f"{link}: a symbolic link (to {os.readlink(link)}){more}; kwh writes only into the "
                       "warehouse's own folders: replace the link by what it points to (mv it there), or "
                       "link the whole warehouse folder instead. Reading commands still work")
