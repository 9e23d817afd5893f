"""gzip-compressed exports (`gpt2.raw.csv.gz`, `report.sqlite.gz`), read transparently.

A file is gzip by its content (magic bytes 1f 8b), not its name. Sniffing decompresses only the first
bytes; reading decompresses the whole file, in bounded chunks and never past base.MAX_READ_BYTES, to
a temporary file (readers take a path, and SQLite needs a real file), which the wrapped format's own
reader reads. Errors name the .gz file, and the result's path is the .gz file.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from dataclasses import replace
from pathlib import Path

from kwarehouse.errors import InputError, KwhError
from kwarehouse.ingest import base
from kwarehouse.ingest.base import Reader, ReadResult

MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_gzip(head: bytes) -> bool:
    return head.startswith(MAGIC)


def head_of(compressed_head: bytes, limit: int) -> bytes:
    """The first (up to `limit`) decompressed bytes of a gzip file's first bytes; b"" when they do not
    decompress. Never raises on a file cut short: sniffing only needs its beginning."""
    try:
        return zlib.decompressobj(wbits=31).decompress(compressed_head, limit)
    except zlib.error:
        return b""


def inner_name(path: Path) -> str:
    """gpt2.raw.csv.gz -> gpt2.raw.csv: what the temporary copy is called, for readers that look at it."""
    return path.name[:-3] if path.name.lower().endswith(".gz") else path.name


class Gzipped:
    """A reader of gzip-compressed exports of the format `inner` reads."""

    def __init__(self, inner: Reader):
        self.inner = inner
        self.name = inner.name

    def sniff(self, path: Path, head: bytes) -> bool:
        return is_gzip(head) and sniff_plain(self.inner, path, head_of(head, len(head)))

    def read(self, path: Path) -> ReadResult:
        with tempfile.TemporaryDirectory(prefix="kwh-gunzip-") as folder:
            plain = Path(folder) / inner_name(path)
            decompress(path, plain)
            try:
                result = self.inner.read(plain)
            except KwhError as exc:
                raise renamed_error(exc, plain, path) from None
            except Exception as exc:   # noqa: BLE001 - ingest.read_with words it, naming the .gz file
                raise type(exc)(str(exc).replace(str(plain), str(path))) from None
        return replace(result, path=path)


def sniff_plain(inner: Reader, path: Path, plain: bytes) -> bool:
    """Whether `inner` claims the gzip file `path` whose decompressed first bytes are `plain`."""
    if plain.startswith(SQLITE_MAGIC):
        # the SQLite sniffer opens the file itself, which it cannot do compressed: its magic is
        # enough here, and reading checks the tables
        return inner.name == "nsys-sqlite"
    return inner.sniff(path, plain)


def decompress(source: Path, target: Path) -> None:
    """Decompress `source` into `target` a chunk at a time, refusing output beyond MAX_READ_BYTES."""
    with open(target, "wb") as out:
        for chunk in chunks(source):
            out.write(chunk)


def chunks(source: Path):
    """The decompressed bytes of `source`, CHUNK_BYTES at a time, never past MAX_READ_BYTES; a file
    cut short or corrupt is an InputError naming it (what reading and hashing a .gz both need)."""
    written = 0
    try:
        with gzip.open(source, "rb") as packed:
            while chunk := packed.read(base.CHUNK_BYTES):
                written += len(chunk)
                if written > base.MAX_READ_BYTES:
                    raise InputError(source, f"decompresses to more than {base.MAX_READ_BYTES / 1e9:.1f} GB, "
                                     "more than kwh reads from one export; export fewer launches per file")
                yield chunk
    except EOFError:
        raise InputError(source, "compressed file ends early (still being copied, or truncated?); wait for the "
                         "copy to finish or compress the export again") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(source, f"corrupt gzip data ({exc}); compress the export again") from None
    except OSError as exc:
        if exc.errno is None:
            raise InputError(source, f"corrupt gzip data ({exc}); compress the export again") from None
        raise InputError(source, f"cannot decompress it: {os.strerror(exc.errno)}") from None


def renamed_error(exc: KwhError, plain: Path, path: Path) -> KwhError:
    """The error an inner reader raised on the temporary copy `plain`, naming the file the user gave
    (`path`) instead: the gunzipped copy here, the UTF-8 copy of a UTF-16 capture in captured_text."""
    if isinstance(exc, InputError):   # NothingToStore stays what it is: a compressed empty capture is one too
        return type(exc)(path, exc.message.replace(str(plain), str(path)), line=exc.line)
    return type(exc)(str(exc).replace(str(plain), str(path)))
