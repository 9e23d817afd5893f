"""`kwh diff`: what changed between two sets of runs, kernel identity by kernel identity.

A side is one run id (or a unique prefix of one) or a selector `key=value[,key=value...]` over runs:
model, gpu, date (the run date), tool, or tag.NAME. Each side's time of a kernel identity is its GPU
time per run, averaged over the side's runs (a run without the kernel counts as 0), so sides with
different numbers of runs compare fairly. ncu runs compare through `kernels` (with their bottleneck
class); nsys and PyTorch-trace runs through `kernel_launches` (real GPU time), and an nsys run exported
as `nsys stats` only through its kernel summary.

A side of ncu runs compared with a side of traces (different sources of the same kernels) compares each
side's own time, with a note: ncu replay time and timeline time are different clocks.

With two or more runs on both sides each kernel gets a significance note from Welch's t statistic
over its per-run times (|t| >= 2: significant); with one run on a side there is no estimate.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from kwarehouse.answers import queries
from kwarehouse.errors import KwhError
from kwarehouse.store.warehouse import Warehouse

# A selector's conditions are the one SQL built here (sql/diff_runs_selected.sql takes them): which keys
# a side names, and how often, is the user's; each key's column is fixed below and its value bound.
SELECTOR_KEYS = {"model": "model", "gpu": "gpu", "date": "CAST(run_date AS VARCHAR)", "tool": "tool"}
TAG_CONDITION = "list_contains(map_extract(tags, ?), ?)"
RUN_ID = re.compile(r"^[0-9a-f]{4,16}$")
T_SIGNIFICANT = 2.0


@dataclass
class KernelChange:
    kernel_id: str
    kernel_base: str
    library: str
    op_class: str
    change: str                      # slower, faster, appeared, disappeared, bottleneck changed, unchanged, no duration on a side
    baseline_ns: float               # GPU time per run
    candidate_ns: float
    delta_pct: float | None
    baseline_share_pct: float
    candidate_share_pct: float
    baseline_bottleneck: str | None
    candidate_bottleneck: str | None
    significance: str


@dataclass
class Diff:
    baseline_runs: list[str]
    candidate_runs: list[str]
    baseline_total_ns: float
    candidate_total_ns: float
    kernels: list[KernelChange] = field(default_factory=list)
    note: str | None = None          # what the reader must know to trust the comparison

    @property
    def total_delta_pct(self) -> float | None:
        return _pct(self.baseline_total_ns, self.candidate_total_ns)

    COLUMNS = ("kernel_id", "kernel_base", "library", "op_class", "change", "baseline_ns", "candidate_ns",
               "delta_pct", "baseline_share_pct", "candidate_share_pct", "baseline_bottleneck",
               "candidate_bottleneck", "significance")

    def rows(self, include_unchanged: bool = False) -> list[tuple]:
        return [tuple(getattr(k, c) for c in self.COLUMNS) for k in self.kernels
                if include_unchanged or k.change != "unchanged"]

    def regressions(self, limit_pct: float, min_share_pct: float = 0.0) -> list[str]:
        """What grew by more than limit_pct: the total, or a kernel present on both sides."""
        if self.note:      # ncu replay time against timeline time would "regress" by the clock alone
            raise KwhError("--fail-above gates runs of one kind: one side is ncu runs and the other traces; "
                           "add tool=ncu or tool=torch/tool=nsys to both selectors")
        found = []
        if (self.total_delta_pct or 0) > limit_pct:
            found.append(f"total GPU time +{self.total_delta_pct:.1f}%")
        for k in self.kernels:
            if (k.delta_pct is not None and k.change != "appeared" and k.delta_pct > limit_pct
                    and max(k.baseline_share_pct, k.candidate_share_pct) >= min_share_pct):
                found.append(f"{k.kernel_base} +{k.delta_pct:.1f}%")
        return found


def _pct(before: float, after: float) -> float | None:
    return None if not before else 100.0 * (after - before) / before


def resolve(warehouse: Warehouse, selector: str) -> list[tuple[str, str]]:
    """(run_id, tool) of the runs a selector names; an error when none."""
    con = warehouse.connect()
    try:
        text = selector.strip()
        if RUN_ID.match(text):
            found = con.execute(queries.load("diff_runs_by_id"), [text]).fetchall()
            if len(found) > 1:
                raise KwhError(f"run id prefix {text!r} is ambiguous: {', '.join(r for r, _ in found)}")
            if found:
                return found
        conditions, params = [], []
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep:
                raise KwhError(f"{selector!r}: expected a run id or key=value[,key=value], e.g. model=gpt2,date=2026-11-23")
            if key.startswith("tag."):
                conditions.append(TAG_CONDITION)
                params += [key[4:], value.strip()]
            elif key in SELECTOR_KEYS:
                conditions.append(f"{SELECTOR_KEYS[key]} = ?")
                params.append(value.strip())
            else:
                raise KwhError(f"{selector!r}: unknown key {key!r}; use model, gpu, date, tool or tag.NAME")
        selected = queries.load("diff_runs_selected", selector=" AND ".join(conditions) or "true")
        found = con.execute(selected, params).fetchall()
        if not found:
            raise KwhError(f"no run matches {selector!r}; kwh sql \"SELECT run_id, model, run_date, tool FROM runs\" lists them")
        return found
    finally:
        con.close()


def diff(warehouse: Warehouse, baseline: str, candidate: str, threshold_pct: float = 5.0) -> Diff:
    sides = [resolve(warehouse, baseline), resolve(warehouse, candidate)]
    # GPU telemetry runs (nvidia-smi, NVML samples) hold no kernels: a side's average would count them as 0
    for selector, side in zip((baseline, candidate), sides):
        if all(tool == "telemetry" for _, tool in side):
            raise KwhError(f"{selector!r} names only GPU telemetry runs, which hold no kernels; name ncu, nsys or torch runs")
    sides = [[(r, t) for r, t in side if t != "telemetry"] for side in sides]
    # A side may hold a model's ncu run and its traces: compare the kind both sides have, ncu first
    # (its counters also give the bottleneck); `tool=torch` in a selector picks the traces.
    kinds = [{tool == "ncu" for _, tool in side} for side in sides]
    if all(True in kind for kind in kinds):
        sides = [[(r, t) for r, t in side if t == "ncu"] for side in sides]
    elif all(False in kind for kind in kinds):
        sides = [[(r, t) for r, t in side if t != "ncu"] for side in sides]
    timelines = [side[0][1] != "ncu" for side in sides]
    ids = [[run for run, _ in side] for side in sides]
    con = warehouse.connect()
    try:
        per_run = [_per_run(con, side, timeline) for side, timeline in zip(ids, timelines)]
        bottlenecks = [_bottlenecks(con, side) if not timeline else {} for side, timeline in zip(ids, timelines)]
        names = {**_names(con, ids[0], timelines[0]), **_names(con, ids[1], timelines[1])}
    finally:
        con.close()
    totals = [sum(ns or 0.0 for times in side.values() for ns in times.values()) / len(ids[i]) for i, side in enumerate(per_run)]
    result = Diff(ids[0], ids[1], totals[0], totals[1])
    if timelines[0] != timelines[1]:
        kinds = ["timeline time (nsys/PyTorch)" if timeline else "ncu replay time" for timeline in timelines]
        result.note = (f"the baseline is {kinds[0]} and the candidate {kinds[1]}: ncu serialises and replays each "
                       "kernel (small kernels read 1.6-2.5x longer) and profiles only its launch range, so the deltas "
                       "mix two clocks; kernels are matched by identity. Compare runs of one kind to time a change.")
    for kernel_id in sorted(set(per_run[0]) | set(per_run[1])):
        untimed = any(None in per_run[i].get(kernel_id, {}).values() for i in (0, 1))
        samples = [[per_run[i].get(kernel_id, {}).get(run) or 0.0 for run in ids[i]] for i in (0, 1)]
        means = [sum(s) / len(s) for s in samples]
        present = [kernel_id in per_run[0], kernel_id in per_run[1]]
        delta = _pct(means[0], means[1]) if all(present) and not untimed else None
        before, after = bottlenecks[0].get(kernel_id), bottlenecks[1].get(kernel_id)
        if untimed:
            change = "no duration on a side"     # the kernel ran, its time is not known: never "unchanged"
        elif not present[0]:
            change = "appeared"
        elif not present[1]:
            change = "disappeared"
        elif delta is not None and delta >= threshold_pct:
            change = "slower"
        elif delta is not None and delta <= -threshold_pct:
            change = "faster"
        elif before != after and timelines[0] == timelines[1]:   # a trace has no bottleneck to change
            change = "bottleneck changed"
        else:
            change = "unchanged"
        base, library, op_class = names[kernel_id]
        result.kernels.append(KernelChange(
            kernel_id, base, library, op_class, change, means[0], means[1], delta,
            100 * means[0] / totals[0] if totals[0] else 0.0, 100 * means[1] / totals[1] if totals[1] else 0.0,
            before, after, "no duration (an export without gpu__time_duration)" if untimed
            else _significance(samples) if all(present) else "only on one side"))
    result.kernels.sort(key=lambda k: (-abs(k.candidate_ns - k.baseline_ns), k.kernel_id))
    return result


def _per_run(con, runs: list[str], timeline: bool) -> dict[str, dict[str, float]]:
    if timeline:
        rows = con.execute(queries.load("diff_timeline_time"), [runs, runs]).fetchall()
    else:
        rows = con.execute(queries.load("diff_ncu_time"), [runs]).fetchall()
    out: dict[str, dict[str, float]] = {}
    for kernel_id, run_id, ns in rows:
        out.setdefault(kernel_id, {})[run_id] = ns     # None: an export without durations (ncu --metrics)
    return out


def _bottlenecks(con, runs: list[str]) -> dict[str, str]:
    """The bottleneck class holding most of each kernel identity's time on one side."""
    return dict(con.execute(queries.load("diff_bottlenecks"), [runs]).fetchall())


def _names(con, runs: list[str], timeline: bool) -> dict[str, tuple[str, str, str]]:
    if timeline:
        rows = con.execute(queries.load("diff_timeline_names"), [runs, runs]).fetchall()
    else:
        rows = con.execute(queries.load("diff_ncu_names"), [runs]).fetchall()
    return {k: (b, lib, op) for k, b, lib, op in rows}


def _significance(samples: list[list[float]]) -> str:
    if min(len(s) for s in samples) < 2:
        return "one run on a side: no estimate"
    means = [sum(s) / len(s) for s in samples]
    variances = [sum((x - m) ** 2 for x in s) / (len(s) - 1) for s, m in zip(samples, means)]
    spread = math.sqrt(sum(v / len(s) for v, s in zip(variances, samples)))
    if spread == 0:
        return "significant (no run-to-run spread)" if means[0] != means[1] else "identical"
    t = (means[1] - means[0]) / spread
    verdict = "significant" if abs(t) >= T_SIGNIFICANT else "within run-to-run noise"
    return f"{verdict} (Welch t={t:.1f})"
