"""Print the [known] kernels list of kernel_scopes.toml from real exports.

Full namespaces come from names no tool abbreviated: the Itanium-mangled names of
`ncu --print-kernel-base mangled` exports (demangled here with the C++ runtime) and the kernel
names of PyTorch profiler traces (CUPTI demangles in full). Usage:

    python tools/derive_kernel_scopes.py ../shared/corpus-extracted/*/ > known.txt
"""

import json
import sys
from pathlib import Path

import polars as pl

from kwarehouse.normalize.identity import kernel_base


def names(folder: Path):
    for export in folder.glob("*.raw.mangled.csv"):
        frame = pl.read_csv(export, skip_rows_after_header=1, infer_schema=False)
        yield from frame["Kernel Name"].unique().to_list()
    trace = folder / "trace.json"
    if trace.exists():
        events = json.loads(trace.read_text())["traceEvents"]
        yield from {e["name"] for e in events if e.get("cat") == "kernel"}


def main(folders: list[str]) -> None:
    bases = {kernel_base(n, complete=False) for folder in folders for n in names(Path(folder))}
    for base in sorted(b for b in bases if "::" in b):
        print(f'  "{base}",')


if __name__ == "__main__":
    main(sys.argv[1:])
