"""Captures that legitimately hold no CUDA data: nothing to store, and not a failure.

A profiler run of a CPU-only program, of a program that never reached the GPU code, or with filters
that matched no kernel leaves a capture that is complete and correct but empty. Counting it as a
failed file made every ingest of its folder fail again (and `kwh nightly` with it) until someone
deleted it; ingest instead records it in the catalog with the reason (build/sources.py) and later
ingests skip it.

Readers raise errors.NothingToStore for the empty captures of their own formats (an nsys export
without CUDA kernel activity, nsys stats that say "does not contain CUDA kernel data", a PyTorch
trace without GPU events). This module finds the two kinds no reader raises it for:
- ncu's output when it profiled nothing: what `ncu --csv python app.py > out.csv` saves when no
  kernel ran or its filters matched none; no reader claims it (there is no report in it);
- a read export with no rows at all (an nsys export whose CUDA activity tables are there but empty).
"""

from __future__ import annotations

from pathlib import Path

from kwarehouse.ingest import base
from kwarehouse.ingest.base import ReadResult

# What ncu prints at the end of a run in which it profiled no kernel, e.g. (tests/data/profile-h100/
# custom_nothing/logs/ncu.log): "==WARNING== No kernels were profiled." then "Available Kernels:".
NCU_NOTHING_PROFILED = "==WARNING== No kernels were profiled."
NCU_NOTHING_PROFILED_REASON = (
    'ncu profiled no kernel ("==WARNING== No kernels were profiled."); if kernels were expected, check '
    "ncu's --kernel-name, --launch-skip, --launch-count and --nvtx-include filters, and that the "
    "application ran its kernels on this GPU")
# A file with NUL bytes in its first KB is binary (a report file, an image), except UTF-16 text
# (PowerShell's `>` writes it): only text is searched for ncu's message.
_TEXT_PROBE_BYTES = 1024


def ncu_profiled_nothing(path: Path) -> int | None:
    """The line (1-based; UTF-16 text: 0 when not counted) of ncu's "No kernels were profiled."
    in a text file, or None. Reads the file in chunks, never more than one chunk at a time and
    never past base.MAX_READ_BYTES: the message comes after everything the program printed."""
    with open(path, "rb") as handle:
        probe = handle.read(_TEXT_PROBE_BYTES)
        utf16 = _utf16(probe)
        if b"\0" in probe and not utf16:
            return None
        marker = NCU_NOTHING_PROFILED.encode("utf-16-le" if utf16 else "utf-8")
        newline = "\n".encode("utf-16-le" if utf16 else "utf-8")
        handle.seek(0)
        tail, lines, read = b"", 0, 0
        while read < base.MAX_READ_BYTES and (chunk := handle.read(base.CHUNK_BYTES)):
            read += len(chunk)
            window = tail + chunk
            found = window.find(marker)
            if found >= 0:
                return 0 if utf16 else lines + window.count(newline, 0, found) + 1
            # keep the end that could begin the marker; count the lines of what is dropped
            keep = min(len(window), len(marker) - 1)
            lines += window.count(newline, 0, len(window) - keep)
            tail = window[len(window) - keep:]
    return None


def _utf16(probe: bytes) -> bool:
    """UTF-16LE text: a byte-order mark, or ASCII with a NUL after every character."""
    if probe.startswith(b"\xff\xfe"):
        return True
    sample = probe[:64]
    return len(sample) >= 8 and sample[1::2].count(0) == len(sample[1::2]) and 0 not in sample[0::2]


def holds_nothing(result: ReadResult) -> bool:
    """Whether a read export has no row in any table: nothing of it would be stored."""
    frames = (result.launches, result.metrics, result.timeline, result.summaries, result.nvtx_summaries,
              result.samples, *result.tables.values())
    return all(frame is None or frame.height == 0 for frame in frames)


def no_rows_reason(result: ReadResult) -> str:
    return (f"no CUDA activity in this {result.format} export (no kernel, memory copy or memset row, nor "
            "any other table kwh keeps); if the program used the GPU, profile it with CUDA tracing on")
