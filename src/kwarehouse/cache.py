"""The folder where kwh keeps what it can make again, once per machine instead of once per process (the
views template, store/template.py; the tables' typed schemas, schema.py): $KWH_CACHE_DIR, else
$XDG_CACHE_HOME/kwarehouse, else ~/.cache/kwarehouse. A cached file is written under a name of its own and
renamed into place, so a process never reads half of one; what cannot be cached (no folder to be had, a
read-only home) is made again, never a failure."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def folder() -> Path:
    if os.environ.get("KWH_CACHE_DIR"):
        return Path(os.environ["KWH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kwarehouse"


def write(target: Path, content: bytes) -> None:
    """`content` at `target`, whole or not at all (raises OSError where the folder cannot take it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.partial"
    try:
        partial.write_bytes(content)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
