"""ncu presets (presets.toml beside this file) and the check against the installed ncu.

A section or metric the installed ncu does not know would stop ncu ("Metrics that cannot be collected
will generate an error"), so each is looked up first in what `ncu --list-sections` and `ncu
--query-metrics` print, and an unknown one is dropped with a note. When ncu cannot answer (no GPU for
--query-metrics, say), nothing is dropped and the note says so.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources

# `--query-metrics` lists metrics of three collections; launch__* and device__* are not "profiling" ones.
METRIC_COLLECTIONS = ("profiling", "launch", "device")
_SECTION_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s.*\S\.section\s*$")
_METRIC_LINE = re.compile(r"^\s*([a-z0-9]+__[A-Za-z0-9_]+)\b")


@dataclass(frozen=True)
class Preset:
    name: str
    cost: str
    passes_h100: int | None
    sections: tuple[str, ...] = ()
    section_set: str | None = None
    metrics: tuple[str, ...] = ()
    seconds_per_launch_h100: float | None = None    # the estimate's prior (presets.toml says where from)


@dataclass
class Checked:
    """A preset's ncu arguments after the check, with what was dropped and why."""
    args: list[str]
    sections: list[str]
    metrics: list[str]
    notes: list[str] = field(default_factory=list)


def presets() -> dict[str, Preset]:
    data = tomllib.loads(resources.files("kwarehouse.collect").joinpath("presets.toml").read_text(encoding="utf-8"))
    return {name: Preset(name, spec["cost"], spec.get("passes_h100"), tuple(spec.get("sections", ())),
                         spec.get("set"), tuple(spec.get("metrics", ())), spec.get("seconds_per_launch_h100"))
            for name, spec in data.items()}


# --preset choices: every preset but the discovery pass's
PRESET_NAMES = tuple(name for name in presets() if name != "durations")


def preset(name: str) -> Preset:
    return presets()[name]


def parse_sections(text: str) -> set[str]:
    """Section identifiers in `ncu --list-sections` output (first column of each *.section line)."""
    return {m.group(1) for m in map(_SECTION_LINE.match, text.splitlines()) if m and m.group(1) != "Identifier"}


def parse_metrics(text: str) -> set[str]:
    """Metric base names in `ncu --query-metrics` output (first column: `dram__bytes`)."""
    return {m.group(1) for m in map(_METRIC_LINE.match, text.splitlines()) if m}


def metric_base(metric: str) -> str:
    """`dram__bytes_read.sum` -> `dram__bytes_read`: what --query-metrics lists (base mode)."""
    return metric.split(".", 1)[0]


def check(chosen: Preset, sections: set[str] | None, metrics: set[str] | None,
          unasked: str | None = None) -> Checked:
    """The ncu arguments of a preset, keeping what the installed ncu knows. `sections`/`metrics`:
    what it listed, or None when it could not be asked (nothing is dropped then; `unasked` says why)."""
    notes = []
    kept_sections = list(chosen.sections)
    if sections is not None:
        missing = [s for s in kept_sections if s not in sections]
        if missing:
            notes.append(f"this ncu has no section {', '.join(missing)}: dropped from preset {chosen.name}")
        kept_sections = [s for s in kept_sections if s in sections]
    elif kept_sections:
        notes.append(f"sections not checked: {unasked or '`ncu --list-sections` gave no answer'}")
    kept_metrics = list(chosen.metrics)
    if metrics is not None:
        missing = [m for m in kept_metrics if metric_base(m) not in metrics]
        if missing:
            notes.append(f"this ncu lists no metric {', '.join(missing)}: dropped from preset {chosen.name}")
        kept_metrics = [m for m in kept_metrics if metric_base(m) in metrics]
    elif kept_metrics:
        notes.append(f"metrics not checked: {unasked or '`ncu --query-metrics` gave no answer'}")
    args: list[str] = []
    if chosen.section_set:
        args += ["--set", chosen.section_set]
    for section in kept_sections:
        args += ["--section", section]
    if kept_metrics:
        args += ["--metrics", ",".join(kept_metrics)]
    return Checked(args, kept_sections, kept_metrics, notes)
