"""Run metadata from what sits beside an export: manifest*.json and ncu_version.txt."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from kwarehouse.errors import InputError

# Manifest keys with a column of their own in `runs`; other keys are kept as tags.
RUN_FIELDS = {"model": str, "family": str, "task": str, "dtype": str, "batch": int, "seq_len": int,
              "gpu": str, "sm_count": int, "date": str}
VERSION_KEYS = ("torch", "cuda", "python", "transformers", "cupy", "triton", "driver", "cudnn", "jax")


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
    meta = RunMetadata()
    manifest = pick_manifest(folder, tool)
    if manifest is not None:
        meta.manifest_path = manifest
        meta.manifest_text = manifest.read_text(encoding="utf-8", errors="replace")
        try:
            data = json.loads(meta.manifest_text)
        except json.JSONDecodeError as exc:
            raise InputError(manifest, f"not valid JSON ({exc.msg}); fix or remove the manifest",
                             line=exc.lineno) from exc
        if not isinstance(data, dict):
            raise InputError(manifest, "manifest must be a JSON object of run metadata")
        for key, value in data.items():
            if key in RUN_FIELDS:
                meta.fields[key] = _checked(manifest, key, value, RUN_FIELDS[key])
            elif key in VERSION_KEYS:
                meta.versions[key] = str(value)
            elif isinstance(value, (str, int, float, bool)):
                meta.tags[key] = str(value)
            else:
                meta.tags[key] = json.dumps(value, sort_keys=True)
        if "date" in meta.fields:
            try:
                date.fromisoformat(meta.fields["date"])
            except ValueError:
                raise InputError(manifest, f'"date" must be YYYY-MM-DD, not {meta.fields["date"]!r}') from None
    version_file = folder / "ncu_version.txt"
    if tool == "torch":
        meta.tool_version = meta.versions.get("torch")
    elif tool == "ncu" and version_file.is_file():
        found = re.search(r"Version\s+([\d.]+)", version_file.read_text(errors="replace"))
        meta.tool_version = found.group(1) if found else None
    return meta


def _checked(path: Path, key: str, value, kind: type):
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(path, f'"{key}" must be an integer, not {json.dumps(value)}')
        return value
    if not isinstance(value, str) or not value.strip():
        raise InputError(path, f'"{key}" must be a non-empty string, not {json.dumps(value)}')
    return value.strip()
