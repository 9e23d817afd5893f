"""Walking the sources of an ingest: every file under them, one list per folder."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kwarehouse.build.report import IngestReport
from kwarehouse.errors import KwhError, display_path


@dataclass
class Found:
    """What one walk of an ingest's sources found: every file, with whether the user named it directly,
    and what the walk could not or would not enter (one line each, for the ingest's report). The CLI
    counts the files for its progress bar and hands the same Found to the ingest: one walk."""
    files: list[tuple[Path, bool]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # symlinked folders (path, why)
    failed: list[str] = field(default_factory=list)                # unreadable folders

    def batches(self) -> list[list[tuple[Path, bool]]]:
        """The files, one list per folder, in discovery order."""
        batches: dict[Path, list[tuple[Path, bool]]] = {}
        for path, explicit in self.files:
            batches.setdefault(path.parent.absolute(), []).append((path, explicit))
        return list(batches.values())


def discover(sources: Iterable[Path]) -> Found:
    """Every file under `sources`, with whether the user named it directly. Symlinked folders are
    not followed (no loops) and unreadable folders cannot be: both are in the answer (skipped and
    failed) so nothing is left out without a word. Hidden files and folders are skipped."""
    found = Found()
    for source in sources:
        source = Path(source)
        if source.is_dir():
            def unreadable(error: OSError) -> None:
                found.failed.append(f"{display_path(error.filename)}: cannot read this folder "
                                    f"({error.strerror}); its files were not ingested: check its permissions")
            for folder, dirs, files in os.walk(source, followlinks=False, onerror=unreadable):
                linked = [d for d in dirs if not d.startswith(".") and os.path.islink(os.path.join(folder, d))]
                found.skipped.extend((display_path(Path(folder) / d), "a symbolic link to a folder: not followed "
                                      "(no loops); name it on the command line to ingest it") for d in linked)
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in linked)
                found.files.extend((Path(folder) / f, False) for f in sorted(files) if not f.startswith("."))
        elif source.exists() or source.is_symlink():
            found.files.append((source, True))
        else:
            raise KwhError(f"{display_path(source)}: no such file or folder")
    return found


def settled(batches: list[list[tuple[Path, bool]]], settle_seconds: float,
             report: IngestReport) -> list[list[tuple[Path, bool]]]:
    """The batches without files modified in the last `settle_seconds` (reported as skipped)."""
    import time
    now = time.time()
    out = []
    for batch in batches:
        kept = []
        for path, explicit in batch:
            try:
                age = now - path.stat().st_mtime
            except OSError:
                age = settle_seconds
            if age < settle_seconds:
                report.skipped.append((display_path(path), f"modified {max(age, 0):.0f} s ago (still being written?); "
                                                  "left for the next ingest"))
            else:
                kept.append((path, explicit))
        if kept:
            out.append(kept)
    return out
