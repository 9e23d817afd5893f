"""What an ingest reports: the runs it stored, the files it skipped or could not read, the runs built
one by one because building them together failed (and why), the captures with nothing to store."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RunSummary:
    run_id: str
    model: str
    gpu: str
    kernels: int
    files: list[str]
    new: bool
    replaced: list[str] = field(default_factory=list)   # partial runs this one replaced
    notes: list[str] = field(default_factory=list)      # what the user should know (one line each)
    warnings: list[str] = field(default_factory=list)   # rows its files held that could not be read


@dataclass
class EmptyCapture:
    """A capture that legitimately holds no CUDA data (errors.NothingToStore): not a failure, and
    recorded in the catalog (catalog.empty_files) so that later ingests skip it."""
    path: str          # as messages show it
    reason: str        # why there is nothing to store, and what to do if there should have been
    sha256: str
    stored_path: str   # as the catalog records source paths
    format: str
    size: int | None = None

    def catalog_row(self) -> dict:
        return {"sha256": self.sha256, "path": self.stored_path, "format": self.format, "reason": self.reason,
                "size": self.size}


@dataclass
class IngestReport:
    runs: list[RunSummary] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (path, why), not an error
    failed: list[str] = field(default_factory=list)                # one error line each
    repairs: list[str] = field(default_factory=list)
    # runs built one by one because building them together failed, and why (one line each): the rows
    # are the same, only slower; a clean corpus never falls back (tested)
    fallbacks: list[str] = field(default_factory=list)
    empty: list[EmptyCapture] = field(default_factory=list)        # nothing to store: not an error either

    @property
    def ok(self) -> bool:
        return not self.failed


def extend(report: IngestReport, more: IngestReport) -> None:
    """Add what `more` reports to `report`, after what it has."""
    report.runs.extend(more.runs)
    report.skipped.extend(more.skipped)
    report.failed.extend(more.failed)
    report.repairs.extend(more.repairs)
    report.fallbacks.extend(more.fallbacks)
    report.empty.extend(more.empty)
