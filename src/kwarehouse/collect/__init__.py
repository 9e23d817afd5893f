"""Collection (`kwh profile`): discover a workload's hot kernels, profile just those with ncu, export
the pages kwh reads, write the run's manifest, and optionally ingest it.

  discovery.py        the cheap first pass (PyTorch profiler, nsys, or ncu durations only) and its parsing
  selection.py        top N / covering X % of GPU time, and the escaped kernel-name regex ncu filters on
  presets.py          ncu section presets (presets.toml) checked against the installed ncu
  environment.py      GPU, driver, CUDA, clocks and versions for the manifest
  profiling.py        the plan (every command, printable with --dry-run) and its execution
  command.py          the click command (needs only click and the standard library)
  tags.py             --tag KEY=VALUE, shared with kwh ingest
  torch_discovery.py  runs a Python command under the PyTorch profiler (executed by the workload's python)

Everything here but --ingest runs with the standard library (and click for the command), so a GPU
machine without polars or DuckDB can collect, and another machine can ingest the folder later.
"""
