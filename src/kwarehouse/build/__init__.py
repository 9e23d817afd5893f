"""Exports -> run tables; nothing here writes to the warehouse (the jobs do, under its writer lock).

discover  walks the sources: every file, by folder, settled ones only where asked
sources   reads one file: its content hash, whether it is new, a partial copy's complete version,
          the run metadata beside it, the sidecars skipped by kind
run       groups a folder's sources into runs and builds one run's tables (build_run)
batch     builds many new ncu runs in one vectorized pass (build_ncu_batch): batch, else run by run
isolate   narrows a run's failure to the files that cause it
report    what an ingest reports (runs, skipped, failed, fallbacks, captures with nothing to store)
"""

from kwarehouse.build import batch, discover, isolate, report, run, sources

__all__ = ["batch", "discover", "isolate", "report", "run", "sources"]
