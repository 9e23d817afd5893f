"""The answers' SQL: one query per file in sql/ (file name = query name, its first comment says what it
answers), read from the package as the views are; summary, report and diff hold no query text.

A query may hold a `{name}` placeholder, filled here in one of two ways:
- a piece several queries share is sql/shared/NAME.sql, written once: the kernel lists' CTEs, the
  report's filter conditions (their values are bound parameters, never pasted);
- a piece that only the caller knows is passed in as text: diff's selector conditions, one per key the
  user gave (`model=gpt2,tag.branch=main`), built from a fixed table of columns with the values bound.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from kwarehouse.errors import KwhError

PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


@functools.cache
def _text(relative: str) -> str:
    entry = resources.files("kwarehouse.answers").joinpath("sql", *relative.split("/"))
    if not entry.is_file():
        raise KwhError(f"internal: no query answers/sql/{relative}")
    return entry.read_text(encoding="utf-8")


@functools.cache
def _shared(name: str) -> str:
    """sql/shared/NAME.sql without its trailing newline: it goes in the middle of a line, whose rest a
    trailing comment would swallow, so its last line must be SQL."""
    text = _text(f"shared/{name}.sql").rstrip()
    if "--" in text.splitlines()[-1]:
        raise KwhError(f"internal: answers/sql/shared/{name}.sql must end with SQL, not a comment")
    return text


def load(name: str, **composed: str) -> str:
    """The text of sql/NAME.sql, its placeholders filled: by `composed` where the caller gives the
    piece, else by the shared piece of that name."""
    return PLACEHOLDER.sub(lambda m: composed[m[1]] if m[1] in composed else _shared(m[1]), _text(f"{name}.sql"))


def names() -> list[str]:
    """Every query's name (the shared pieces are not queries)."""
    folder = resources.files("kwarehouse.answers").joinpath("sql")
    return sorted(entry.name[:-4] for entry in folder.iterdir() if entry.name.endswith(".sql"))
