"""Archives and compressed files in an ingested folder (`gpt2.tar.xz`, `runs.tgz`, `out.zip`,
`report.sqlite.xz`, ...): recognised by content, never read inside, and skipped by name with the
command that extracts them. (A gzip-compressed export that is not a tar archive is read: gzipped.py.)

Why kwh does not read inside archives itself: a run is identified by the folder its files sit in, and
the files of an archive have no folder that outlives the ingest (the run and its source paths would
point into a temporary folder); an archive would be decompressed again at every ingest of its folder
just to learn that its files went in already; and an archive may hold what an ingest must not unpack
blindly (links, device files, paths out of the folder, a small file that decompresses to terabytes).
Extracting it once, where the user chooses, costs one command and none of that; so the skip gives
the command, with the paths filled in.
"""

from __future__ import annotations

import bz2
import lzma
import shlex
import zlib
from dataclasses import dataclass
from pathlib import Path

from kwarehouse.errors import display_path

# How much of a file says whether it is an archive: the compression magic, and the tar header's
# "ustar" at byte 257 of what it decompresses to.
HEAD_BYTES = 512
# Compressed bytes read to see the start of what they hold. bzip2 decompresses nothing before a
# whole block (up to 900 KB of input): one that needs more is named by its file name.
PACKED_HEAD_BYTES = 1 << 20
TAR_MAGIC_AT, TAR_MAGIC = 257, b"ustar"

# (magic, compression, its single-file decompress command, its tar flags)
COMPRESSIONS = (
    (b"\x1f\x8b", "gzip", None, "xzf"),          # a gzip file that is not a tar: an export (gzipped.py)
    (b"\xfd7zXZ\x00", "xz", "xz -dk", "xJf"),
    (b"BZh", "bzip2", "bzip2 -dk", "xjf"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d", "--zstd -xf"),
    (b"\x04\x22\x4d\x18", "lz4", "lz4 -d", None),  # tar has no lz4 flag everywhere: piped below
)
# Names that say "tar inside", for the compressions whose start cannot always be decompressed.
TAR_SUFFIXES = (".tar", ".tgz", ".taz", ".tbz", ".tbz2", ".tb2", ".txz", ".tzst", ".tlz4")
# Single-file compression suffixes, removed to name what decompressing gives.
COMPRESSED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".lz4")


@dataclass(frozen=True)
class Archive:
    kind: str        # "an xz-compressed tar archive"
    why: str         # "kwh does not read inside archives"
    command: str     # the shell command that extracts it, paths filled in
    target: str      # what to ingest afterwards

    @property
    def reason(self) -> str:
        """The skip reason (and, for a file named on the command line, the error) that names it."""
        verb = "extract" if "archive" in self.kind else "decompress"
        return f"{self.kind}; {self.why}: {verb} it ({self.command}) and ingest {self.target}"


def archive_of(path: Path) -> Archive | None:
    """What archive or compressed file `path` is, with the command that unpacks it, or None for any
    other file (a gzip-compressed export included). Reads at most PACKED_HEAD_BYTES, and those only
    of a compressed file."""
    with open(path, "rb") as handle:
        head = handle.read(HEAD_BYTES)
        for magic, compression, decompress, tar_flags in COMPRESSIONS:
            if head.startswith(magic):
                head += handle.read(PACKED_HEAD_BYTES - len(head))
                return _compressed(path, head, compression, decompress, tar_flags)
    name = path.name.lower()
    if _is_tar(head):
        return _tar(path, "a tar archive", "xf")
    if head.startswith(b"7z\xbc\xaf\x27\x1c"):
        return _folder_archive(path, "a 7-Zip archive", "7z x {file} -o{folder}")
    if head.startswith(b"Rar!\x1a\x07"):
        return _folder_archive(path, "a RAR archive", "unrar x {file} {folder}/")
    # Word and Excel files, wheels and jars are zip files too: only a .zip is called an archive
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")) and name.endswith(".zip"):
        return _folder_archive(path, "a zip archive", "unzip {file} -d {folder}")
    return None


def _compressed(path: Path, head: bytes, compression: str, decompress: str | None,
                tar_flags: str | None) -> Archive | None:
    plain = _decompressed_start(head, compression)
    tar = _is_tar(plain) if plain else path.name.lower().endswith(
        TAR_SUFFIXES + tuple(f".tar{s}" for s in COMPRESSED_SUFFIXES))
    article = "an" if compression in ("xz", "lz4") else "a"   # "ex-zed", "el-zed"
    if tar:
        kind = f"{article} {compression}-compressed tar archive"
        if tar_flags is None:
            return _folder_archive(path, kind, f"{compression} -dc {{file}} | tar xf - -C {{folder}}", mkdir=True)
        return _tar(path, kind, tar_flags)
    if decompress is None:
        return None
    suffix = next((s for s in COMPRESSED_SUFFIXES if path.name.lower().endswith(s) and path.name.lower() != s), None)
    if suffix:       # xz -dk report.sqlite.xz writes report.sqlite
        single, command = path.with_name(path.name[:-len(suffix)]), f"{decompress} {_quoted(path)}"
    else:            # a name without the suffix the tool expects: say where the output goes
        single = path.with_name(f"{path.name}.out")
        command = f"{compression} -dc {_quoted(path)} > {_quoted(single)}"
    return Archive(f"{article} {compression}-compressed file", f"kwh reads gzip-compressed exports, not {compression}",
                   command, display_path(single))


def _decompressed_start(head: bytes, compression: str) -> bytes:
    """The first bytes `head` decompresses to; b"" when they cannot be had from `head` alone."""
    try:
        if compression == "gzip":
            return zlib.decompressobj(wbits=31).decompress(head, HEAD_BYTES)
        if compression == "xz":
            return lzma.LZMADecompressor().decompress(head, HEAD_BYTES)
        if compression == "bzip2":
            return bz2.BZ2Decompressor().decompress(head, HEAD_BYTES)
        import pyarrow as pa   # zstd and lz4 frames: the standard library has no decoder
        return pa.CompressedInputStream(pa.BufferReader(head), compression).read(HEAD_BYTES)
    except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError, ImportError):
        return b""


def _is_tar(head: bytes) -> bool:
    return head[TAR_MAGIC_AT:TAR_MAGIC_AT + len(TAR_MAGIC)] == TAR_MAGIC


def _tar(path: Path, kind: str, flags: str) -> Archive:
    return _folder_archive(path, kind, f"tar {flags} {{file}} -C {{folder}}", mkdir=True)


def _folder_archive(path: Path, kind: str, template: str, mkdir: bool = False) -> Archive:
    """An archive extracted into a new folder beside it, named after it (gpt2.tar.xz -> gpt2)."""
    stem = _strip(path.name, (".tar", *TAR_SUFFIXES, *COMPRESSED_SUFFIXES, ".zip", ".7z", ".rar"))
    folder = path.with_name(stem if stem and stem != path.name else f"{path.name}.d")
    command = template.format(file=_quoted(path), folder=_quoted(folder))
    if mkdir:   # tar -C needs the folder to exist
        command = f"mkdir -p {_quoted(folder)} && {command}"
    return Archive(kind, "kwh does not read inside archives", command, display_path(folder))


def _strip(name: str, suffixes: tuple[str, ...]) -> str:
    """`name` without its archive suffixes (gpt2.tar.xz -> gpt2, any case)."""
    stripped = True
    while stripped:
        stripped = False
        for suffix in suffixes:
            if name.lower().endswith(suffix) and len(name) > len(suffix):
                name, stripped = name[:-len(suffix)], True
    return name


def _quoted(path: Path) -> str:
    return shlex.quote(display_path(path))
