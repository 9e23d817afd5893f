"""Console text as people save it, made into the lines the console readers parse.

`ncu python train.py > out.txt` and `nsys profile --stats=true ./app > out.txt 2>&1` are rarely the
clean text the tools print: PowerShell's `>` writes UTF-16 (with a BOM, or without one through some
redirections), Windows editors add a BOM and CRLF, old tools end lines with CR only, progress bars
redraw themselves with `\\r`, a coloured terminal leaves ANSI escape codes, stderr (nsys's "SKIPPED:
... does not contain NV Tools Extension (NVTX) data.") lands in the middle of a stdout line where the
block-buffered stdout happened to be flushed, and a copy from a terminal window is wrapped at its width.

Lines are numbered as an editor shows the file: by its `\\n` line ends (a file with none is numbered by
its CR line ends); a `\\r` inside a `\\n` line is not a line break for numbering, but each part it
separates is read as a line of its own (a progress bar's redraws are chatter, a CR-only line end of a
mixed file still ends a row). A tool message spliced into a line is taken out and the line's two
parts are joined again. Terminal wrapping cannot be told from the text alone: `readings` offers the
unwrapped lines as a second reading, and the reader keeps the one it reads more of.
"""

from __future__ import annotations

import codecs
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Sequence

from kwarehouse.errors import InputError, KwhError
from kwarehouse.ingest import base, gzipped
from kwarehouse.ingest.base import Reader, ReadResult

# Byte-order marks, longest test first (a UTF-32 BOM is not expected from any shell).
BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
# ANSI escape sequences: CSI (colours, erase line), OSC (window titles, links), and two-byte escapes.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# Messages ncu and nsys write to stderr (and progress bars nsys redraws): where one starts after the
# first column, it was written into the middle of a stdout line, and runs to the end of that line.
SPLICED = re.compile(r"SKIPPED: |NOTICE: |==(?:PROF|WARNING|ERROR|INFO)== |\[\d+/\d+\] \[")
# A whole line that is such a message: passed over inside a table.
TOOL_MESSAGE = re.compile(r"^(?:SKIPPED: |NOTICE: |WARNING: |==[A-Z]+== |\[\d+/\d+\] \[)")
# How much of a file the UTF-16 test looks at.
_ENCODING_SAMPLE = 4096


def encoding_of(head: bytes) -> tuple[str, int]:
    """(codec, BOM length) of a text file from its first bytes: a BOM decides; without one, ASCII
    text in UTF-16 has a NUL in every other byte (PowerShell pipelines write it without a BOM)."""
    for bom, codec in BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    sample = head[:_ENCODING_SAMPLE]
    pairs = len(sample) // 2
    if pairs >= 4:
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd >= 0.6 * pairs and even <= 0.05 * pairs:
            return "utf-16-le", 0
        if even >= 0.6 * pairs and odd <= 0.05 * pairs:
            return "utf-16-be", 0
    return "utf-8", 0


def is_plain(head: bytes) -> bool:
    """True when the first bytes need nothing of this module: UTF-8 without a BOM, without CR, ANSI
    or UTF-16's NULs (the bytes a sniffer sees are then the file's own)."""
    return encoding_of(head) == ("utf-8", 0) and b"\r" not in head and b"\x1b" not in head


def utf8_window(data: bytes, codec: str, final: bool = True) -> bytes:
    """A window of a file's bytes as the console readers will see it, in UTF-8 with `\\n` line ends
    and no ANSI codes: what sniffers of a UTF-16, CR-only or coloured capture look at."""
    if codec.startswith("utf-16") and len(data) % 2:
        data = data[:-1]     # a character cut by the window's end
    text = data.decode(codec, "replace")
    return normalized(text).encode("utf-8")


def normalized(text: str) -> str:
    """BOM, ANSI codes and CR line ends out; CR-only text gets `\\n` line ends."""
    text = text.removeprefix("\ufeff")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        text = text.replace("\r", "\n")
    return text


def read_text(path: Path, errors: str = "replace") -> str:
    """The whole file decoded by its BOM or UTF-16 pattern (UTF-8 otherwise); `errors` as for
    bytes.decode. Refuses a file larger than base.MAX_READ_BYTES before reading it."""
    try:
        base.refuse_oversized(path)
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read file: {exc.strerror}; check it exists and is readable") from exc
    codec, bom = encoding_of(data[:_ENCODING_SAMPLE])
    return data[bom:].decode(codec, errors)


def decoded_chunks(path: Path) -> Iterator[bytes]:
    """The file as UTF-8 bytes, base.CHUNK_BYTES at a time: transcoding a UTF-16 capture in bounded
    memory for a reader that parses bytes (ncu's CSV pages). Line ends and content are unchanged."""
    with open(path, "rb") as handle:
        head = handle.read(base.CHUNK_BYTES)
        codec, bom = encoding_of(head)
        decoder = codecs.getincrementaldecoder(codec)("replace")
        chunk = head[bom:]
        while chunk:
            yield decoder.decode(chunk).encode("utf-8")
            chunk = handle.read(base.CHUNK_BYTES)
        yield decoder.decode(b"", final=True).encode("utf-8")


@dataclass
class Captured:
    """A capture's lines as the readers parse them, the editor's line number of each, and whether
    the file's last line was ended (a tool ends every line: one that is not was cut short)."""

    lines: list[str]
    numbers: Sequence[int]
    ends_with_newline: bool


def captured_lines(text: str) -> Captured:
    """The lines of decoded console text; see the module docstring for what is undone."""
    text = text.removeprefix("\ufeff")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    if "\n" not in text and "\r" in text:
        text = text.replace("\r", "\n")       # CR-only line ends: the editor's lines
    ends = text.endswith(("\n", "\r"))
    physical = text.split("\n")
    if physical and physical[-1] == "":
        physical.pop()
    if "\r" not in text and not _spliced_anywhere(text):
        return Captured(physical, range(1, len(physical) + 1), ends)
    lines: list[str] = []
    numbers: list[int] = []
    pending = ""       # the first part of a line a tool message was written into
    for number, line in enumerate(physical, 1):
        parts = [part for part in line.split("\r") if part] if "\r" in line else [line]
        for part in parts or [""]:
            part = pending + part
            pending = ""
            splice = SPLICED.search(part, 1)
            if splice:
                lines.append(part[splice.start():])
                numbers.append(number)
                pending = part[:splice.start()]
            else:
                lines.append(part)
                numbers.append(number)
    if pending:
        lines.append(pending)
        numbers.append(len(physical))
    return Captured(lines, numbers, ends)


def _spliced_anywhere(text: str) -> bool:
    """Whether a tool message starts after the first column of some line (a quick test on the whole
    text, so that clean captures are split without a loop over their lines)."""
    return any(match.start() > 0 and text[match.start() - 1] != "\n" for match in SPLICED.finditer(text))


def unwrapped(captured: Captured, starts: re.Pattern | None = None) -> Captured | None:
    """The capture with terminal wrapping undone, or None when it does not look wrapped: a terminal
    cuts every line longer than its width W into W-character pieces, so the longest lines are all
    exactly W characters long and each such piece continues on the next line. A line of exactly W
    characters can also be whole (a line 2W long makes two full pieces): the next line is not joined
    to it when it is blank (no piece is) or matches `starts`, the lines that begin a new line in the
    reader's format."""
    lengths = [len(line) for line in captured.lines]
    if not lengths:
        return None
    width = max(lengths)
    if width < 40 or lengths.count(width) < 2:
        return None
    # each line as its pieces, joined once at the end: adding piece after piece to one string
    # copies it every time (a run of 64,000 rows of the widest length took minutes)
    pieces: list[list[str]] = []
    numbers: list[int] = []
    joining = False
    for index, (line, number, length) in enumerate(zip(captured.lines, captured.numbers, lengths)):
        if joining:
            pieces[-1].append(line)
        else:
            pieces.append([line])
            numbers.append(number)
        joining = length == width
        if joining and index + 1 < len(lengths):
            following = captured.lines[index + 1]
            joining = bool(following) and not (starts and starts.match(following))
    return Captured(["".join(parts) for parts in pieces], numbers, captured.ends_with_newline)


def readings(captured: Captured, starts: re.Pattern | None = None) -> list[Captured]:
    """The ways to read a capture, the text as it is first: a reader keeps the one it reads more of.
    `starts`: lines that always begin a line of their own in the reader's format (see unwrapped)."""
    other = unwrapped(captured, starts)
    return [captured] if other is None else [captured, other]


def is_tool_message(line: str) -> bool:
    """A line that is a message of ncu or nsys (or a progress bar), not part of a table."""
    return bool(TOOL_MESSAGE.match(line))


def needs_transcoding(head: bytes) -> bool:
    """A file a reader that parses UTF-8 bytes cannot read as it is: UTF-16, or a BOM before the text."""
    return encoding_of(head) != ("utf-8", 0)


class Transcoded:
    """A reader that parses bytes (ncu's CSV pages, telemetry logs), given a UTF-16 or BOM-prefixed
    capture as UTF-8: the file is transcoded a chunk at a time to a temporary copy, which the wrapped
    reader reads. Errors and the result name the original file; line numbers do not change."""

    def __init__(self, inner: Reader):
        self.inner = inner
        self.name = inner.name

    def sniff(self, path: Path, head: bytes) -> bool:
        return self.inner.sniff(path, utf8_window(head, encoding_of(head)[0]))

    def read(self, path: Path) -> ReadResult:
        with tempfile.TemporaryDirectory(prefix="kwh-utf8-") as folder:
            plain = Path(folder) / path.name
            written = 0
            with open(plain, "wb") as out:
                for chunk in decoded_chunks(path):
                    written += len(chunk)
                    base.refuse_oversized(path, written)
                    out.write(chunk)
            try:
                result = self.inner.read(plain)
            except KwhError as exc:
                raise gzipped.renamed_error(exc, plain, path) from None
            except Exception as exc:   # noqa: BLE001 - ingest.read_with words it, naming the original file
                raise type(exc)(str(exc).replace(str(plain), str(path))) from None
        return replace(result, path=path)


def refuse_giant_line(path: Path, limit: int, what: str) -> None:
    """Refuse a file holding a line longer than `limit` bytes, reading it as UTF-8 a chunk at a
    time (a UTF-16 capture transcoded on the way, CR line ends counted as line ends) and stopping
    at the end of that line; a file no larger than the limit cannot hold one."""
    try:
        size = path.stat().st_size
        if size <= limit:
            return
        base.refuse_oversized(path, size)
        newlines = returns = 0    # line ends before the line being read: its editor's line number
        length = 0                # its bytes so far
        giant: int | None = None  # its line number, once it is longer than the limit
        for chunk in decoded_chunks(path):
            end = _first_line_end(chunk)
            if end < 0:
                length += len(chunk)
                if length > limit and giant is None:
                    giant = (newlines or returns) + 1
                continue
            length += end
            if length > limit or giant is not None:
                break
            last = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            for offset, piece in _pieces_longer_than(chunk, end + 1, last, limit):
                newlines += chunk.count(b"\n", 0, offset)
                returns += chunk.count(b"\r", 0, offset)
                length = len(piece)
                break
            else:
                newlines += chunk.count(b"\n")
                returns += chunk.count(b"\r")
                length = len(chunk) - last - 1
                continue
            break
    except OSError as exc:
        raise InputError(path, f"cannot read file: {exc.strerror}; check it exists and is readable") from exc
    if length > limit or giant is not None:
        line = giant if giant is not None else (newlines or returns) + 1
        size = f"{length >> 20} MB" if length >= 1 << 20 else f"{length >> 10} KB"
        raise InputError(path, f"a {size} line; no nsys output has lines like it (corrupt file, "
                         f"or not {what}): re-capture it, or pass the report's .sqlite export", line)


def _first_line_end(chunk: bytes) -> int:
    """Where the chunk's first CR or LF is; -1 when it has none."""
    ends = [at for at in (chunk.find(b"\n"), chunk.find(b"\r")) if at >= 0]
    return min(ends) if ends else -1


def _pieces_longer_than(chunk: bytes, start: int, stop: int, limit: int):
    """(offset, piece) of each line of chunk[start:stop] (a run of whole lines) longer than `limit`,
    none in the usual case, where the chunk is smaller than the limit."""
    if stop - start <= limit:
        return
    offset = start
    for piece in chunk[start:stop].splitlines(keepends=True):
        body = piece.rstrip(b"\r\n")
        if len(body) > limit:
            yield offset, body
        offset += len(piece)
