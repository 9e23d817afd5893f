"""Run metadata from what sits beside an export: manifest*.json and ncu_version.txt.

A manifest is a small JSON object written by a person or a script, so everything in it is checked
where it is read: a bad manifest fails the exports of its folder with one line that names it,
never the whole ingest. Integers must fit the warehouse's 64-bit columns, text must be valid
UTF-8, model and GPU names must be short one-line names (check_name).
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from kwarehouse.errors import InputError

# Manifest keys with a column of their own in `runs`; other keys are kept as tags.
RUN_FIELDS = {"model": str, "family": str, "task": str, "dtype": str, "batch": int, "seq_len": int,
              "gpu": str, "sm_count": int, "date": str, "compute_capability": str,
              "clock_control": str, "cache_control": str, "replay_mode": str}
# ncu session settings that change durations and hit rates (runs columns), and the log beside the
# exports they are read from when no manifest gives them: the command line where the log shows it,
# and the warning ncu prints under --clock-control none.
NCU_SETTINGS = ("clock_control", "cache_control", "replay_mode")
NCU_LOG = "ncu.log"
UNLOCKED_CLOCKS_WARNING = "Running with unmodified GPU clocks"
MAX_LOG_BYTES = 1 << 20
# RUN_FIELDS that name a run: they must pass check_name.
NAME_FIELDS = ("model", "gpu")
VERSION_KEYS = ("torch", "cuda", "python", "transformers", "cupy", "triton", "driver", "cudnn", "jax")
# A manifest holds run metadata, not data: kwh reads at most this much of one.
MAX_MANIFEST_BYTES = 1 << 20
# Deeper JSON than this is no run metadata (and deep enough input overflows Python's json).
MAX_MANIFEST_DEPTH = 32
# Model and GPU names are labels people read in query results and reports; a longer one is a
# mistake (a path, a whole command line, a pasted log), not a name.
MAX_NAME_CHARS = 200
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
# ncu_version.txt holds one line of `ncu --version`; read no more than this of it.
MAX_VERSION_FILE_BYTES = 1 << 16
# Characters that have no place in a one-line name: C0/C1 controls (NUL, newline, ESC...), line and
# paragraph separators, and lone surrogates (not encodable as UTF-8).
_NOT_IN_NAMES = {"Cc", "Zl", "Zp", "Cs"}


@dataclass
class RunMetadata:
    manifest_path: Path | None = None
    manifest_text: str | None = None
    fields: dict = field(default_factory=dict)       # RUN_FIELDS found in the manifest
    versions: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    tool_version: str | None = None


# Manifest files by tool, most specific first; manifest.json serves every tool.
MANIFEST_NAMES = {
    "ncu": ("manifest.ncu.json", "manifest.json"),
    "nsys": ("manifest.nsys.json", "manifest.json"),
    "torch": ("manifest.torchprof.json", "manifest.torch.json", "manifest.json"),
}
OTHER_TOOLS = ("ncu", "nsys", "torch")


def check_name(kind: str, value: object, source: Path | str) -> str:
    """`value` without surrounding blanks, when it can name a run's model or GPU: a non-empty string
    of at most MAX_NAME_CHARS characters, valid UTF-8, with no control characters (NUL, newline,
    tab, ...). Otherwise InputError(source, ...) saying what is wrong and what to do. `kind` names
    what is checked in the message ("model", "gpu"); `source` is where the value came from (a
    manifest, an export, "--model").

    >>> check_name("model", "  gpt2 ", "--model")
    'gpt2'
    >>> check_name("gpu", "H100\\n", "run/a.csv")      # a trailing newline is a blank
    'H100'
    """
    if not isinstance(value, str):
        raise InputError(source, f"{kind} name must be a string, not {_shown(value)}")
    name = value.strip()
    if not name:
        raise InputError(source, f"{kind} name is empty; give the {kind} a name")
    if len(name) > MAX_NAME_CHARS:
        raise InputError(source, f"{kind} name is {len(name)} characters long ({_shown(name, 40)}); "
                                 f"kwh takes names of at most {MAX_NAME_CHARS}: shorten it")
    bad = next((ch for ch in name if unicodedata.category(ch) in _NOT_IN_NAMES), None)
    if bad is not None:
        what = "an unpaired surrogate (not valid UTF-8)" if 0xD800 <= ord(bad) <= 0xDFFF else "a control character"
        raise InputError(source, f"{kind} name {_shown(name, 60)} contains {what}, {ascii(bad)}; remove it")
    return name


def pick_manifest(folder: Path, tool: str = "ncu") -> Path | None:
    """The manifest describing `tool`'s exports in `folder`: the tool's own (manifest.ncu.json,
    manifest.torchprof.json, ...) before manifest.json before any other manifest*.json that is
    not another tool's."""
    candidates = sorted(p for p in folder.glob("manifest*.json") if p.is_file())
    for preferred in MANIFEST_NAMES.get(tool, ("manifest.json",)):
        for path in candidates:
            if path.name == preferred:
                return path
    others = [p for p in candidates if not any(t in p.name for t in OTHER_TOOLS if t != tool)]
    return (others or candidates or [None])[0]


def read_metadata(folder: Path, tool: str = "ncu") -> RunMetadata:
    """The run metadata of `tool`'s exports in `folder`; InputError naming the manifest when it is
    unusable (not UTF-8, over MAX_MANIFEST_BYTES, not JSON, too deep, bad field values)."""
    meta = RunMetadata()
    manifest = pick_manifest(folder, tool)
    if manifest is not None:
        meta.manifest_path = manifest
        meta.manifest_text = read_manifest_text(manifest)
        data = parse_manifest(manifest, meta.manifest_text)
        for key, value in data.items():
            _check_text(manifest, "a key", key)
            if key in RUN_FIELDS:
                meta.fields[key] = _checked(manifest, key, value, RUN_FIELDS[key])
            elif key in VERSION_KEYS:
                meta.versions[key] = _check_text(manifest, f'"{key}"', str(value))
            elif isinstance(value, (str, int, float, bool)):
                meta.tags[key] = _check_text(manifest, f'"{key}"', str(value))
            else:
                # ensure_ascii (the default) escapes what is not ASCII: always valid UTF-8.
                meta.tags[key] = json.dumps(value, sort_keys=True)
        if "date" in meta.fields:
            try:
                date.fromisoformat(meta.fields["date"])
            except ValueError:
                raise InputError(manifest, f'"date" must be YYYY-MM-DD, not {_shown(meta.fields["date"])}') from None
    if tool == "ncu" and (folder / NCU_LOG).is_file():
        settings = ncu_settings(_read_head(folder / NCU_LOG, MAX_LOG_BYTES).decode("utf-8", "replace"))
        for key, value in settings.items():
            meta.fields.setdefault(key, value)
    version_file = folder / "ncu_version.txt"
    if tool == "torch":
        meta.tool_version = meta.versions.get("torch")
    elif tool == "ncu" and version_file.is_file():
        found = re.search(r"Version\s+([\d.]+)", _read_head(version_file, MAX_VERSION_FILE_BYTES)
                          .decode("utf-8", "replace"))
        meta.tool_version = found.group(1) if found else None
    return meta


# kwh profile's manifest.json says how far the profile got: "complete", or "running: STEP" / "failed: ..." /
# "interrupted: STEP" for a folder it left partial (collect/profiling.py).
PROFILE_STATUS = "profile_status"


def partial_profile(meta: RunMetadata) -> str | None:
    """The state of a run kwh profile did not finish (its manifest's profile_status), else None."""
    status = meta.tags.get(PROFILE_STATUS)
    return status if status is not None and status != "complete" else None


def ncu_settings(log: str) -> dict[str, str]:
    """clock_control, cache_control, replay_mode from what ncu printed (an ncu.log): each option where a
    command line in it gives one; else clock_control 'none' when ncu warned that clocks were left alone.

    >>> ncu_settings("==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, ...")
    {'clock_control': 'none'}
    >>> ncu_settings("$ ncu --cache-control none --replay-mode=application -o r ./app")
    {'cache_control': 'none', 'replay_mode': 'application'}
    """
    found = {}
    for key in NCU_SETTINGS:
        option = re.search(rf"--{key.replace('_', '-')}(?:=|\s+)([a-z][a-z-]*)", log)
        if option:
            found[key] = option.group(1)
    if "clock_control" not in found and UNLOCKED_CLOCKS_WARNING in log:
        found["clock_control"] = "none"
    return found


def read_manifest_text(path: Path) -> str:
    """The manifest's text: UTF-8 (a byte-order mark is allowed), at most MAX_MANIFEST_BYTES."""
    raw = _read_head(path, MAX_MANIFEST_BYTES + 1)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise InputError(path, f"manifest is over {MAX_MANIFEST_BYTES // (1 << 20)} MiB, the most kwh reads; "
                               "keep run metadata in it and data elsewhere")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the manifest as UTF-8",
                         line=line) from None


def parse_manifest(path: Path, text: str) -> dict:
    """The manifest's JSON object, at most MAX_MANIFEST_DEPTH levels deep."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc.msg}); fix or remove the manifest", line=exc.lineno) from None
    except RecursionError:
        raise InputError(path, f"JSON nested more than {MAX_MANIFEST_DEPTH} levels deep; "
                               "a manifest holds flat run metadata") from None
    except ValueError as exc:     # an integer of more digits than Python converts (4300)
        raise InputError(path, f"not usable JSON ({exc}); fix or remove the manifest") from None
    if not isinstance(data, dict):
        raise InputError(path, "manifest must be a JSON object of run metadata")
    if _depth(data) > MAX_MANIFEST_DEPTH:
        raise InputError(path, f"JSON nested more than {MAX_MANIFEST_DEPTH} levels deep; "
                               "a manifest holds flat run metadata")
    return data


def _read_head(path: Path, limit: int) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(limit)
    except OSError as exc:
        raise InputError(path, f"cannot read it ({exc.strerror or exc}); check its permissions") from None


def _depth(value) -> int:
    """How deeply lists and objects nest in a JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (list, dict)):
            deepest = max(deepest, level + 1)
            if deepest > MAX_MANIFEST_DEPTH:
                return deepest
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _checked(path: Path, key: str, value, kind: type):
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(path, f'"{key}" must be an integer, not {_shown(value)}')
        if not INT64_MIN <= value <= INT64_MAX:
            raise InputError(path, f'"{key}" is {_shown(value)}, out of the range of a 64-bit integer')
        return value
    if key in NAME_FIELDS:
        if not isinstance(value, str):   # keep the message every other string field gives
            raise InputError(path, f'"{key}" must be a non-empty string, not {_shown(value)}')
        return check_name(key, value, path)
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, f'"{key}" must be a non-empty string, not {_shown(value)}')
    return _check_text(path, f'"{key}"', value.strip())


def _check_text(path: Path, what: str, text: str) -> str:
    """`text` when it can be written as UTF-8: JSON's \\ud800 escapes make lone surrogates that
    json.loads accepts and every Parquet writer refuses."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(path, f"{what} holds an unpaired surrogate {ascii(text[exc.start])} "
                               f"({_shown(text, 60)}), which is not valid UTF-8; fix the text") from None
    return text


def _shown(value, limit: int = 80) -> str:
    """A value for an error message: as JSON, a long string or value cut to `limit` characters."""
    if isinstance(value, str) and len(value) > limit:
        return json.dumps(value[:limit], ensure_ascii=False) + "..."   # InputError escapes the rest
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."
