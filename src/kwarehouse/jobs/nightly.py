"""`kwh nightly`: the scheduled job. Ingest a drop folder, roll up the days it touched, compact.

Every step runs even when an earlier one reported bad files (the good ones still go in), and the
job fails (non-zero exit) when any step failed, so cron, systemd and CI all notice. A capture that
legitimately holds no CUDA data (a CPU-only run, a profiler that recorded no kernel) is no failure:
ingest records it ("nothing to store") and skips it on every later night, so it cannot fail them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kwarehouse.build.report import IngestReport
from kwarehouse.jobs import compact, rollup
from kwarehouse.jobs.ingest import ingest
from kwarehouse.store.warehouse import Warehouse


@dataclass
class NightlyReport:
    ingest: IngestReport
    rolled_up: list[str] = field(default_factory=list)
    compacted: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.ingest.ok      # captures with nothing to store are not among its failures

    def summary(self) -> str:
        runs = self.ingest.runs
        empty = f", {len(self.ingest.empty)} with nothing to store" if self.ingest.empty else ""
        return (f"nightly {'ok' if self.ok else 'FAILED'}: ingested {len(runs)} run(s), "
                f"{sum(r.kernels for r in runs)} kernels, {len(self.ingest.failed)} file(s) failed{empty}; "
                f"rolled up {len(self.rolled_up)} day(s); compacted {len(self.compacted)} partition(s)")


def nightly(warehouse: Warehouse, drop: list[Path], settle_seconds: float = 60) -> NightlyReport:
    """settle_seconds: files modified more recently are left for the next night (still copying)."""
    report = NightlyReport(ingest(drop, warehouse, settle_seconds=settle_seconds))
    report.rolled_up = rollup.rollup(warehouse).days
    report.compacted = compact.compact(warehouse)
    return report
