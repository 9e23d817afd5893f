"""Write tests/data/kernel-names/pairs.csv: the same launch as named by ncu and by the PyTorch profiler.

For each corpus model folder (ncu exports + trace.json of the same workload), ncu profiled the first
N kernel launches of one iteration and the trace holds the following iterations; the launch order
is deterministic, so position i of the ncu export and kernel i of the trace (by start time) are the
same kernel. The grid of both is written too, so a test can check the alignment. Usage:

    python tools/derive_kernel_name_pairs.py /tmp/corpus/*/ > tests/data/kernel-names/pairs.csv
"""

import csv
import json
import sys
from pathlib import Path

import polars as pl


def export_names(path: Path) -> pl.DataFrame:
    return pl.read_csv(path, skip_rows_after_header=1, infer_schema=False).select("Kernel Name", "Grid Size")


def main(folders: list[str]) -> None:
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["model", "position", "ncu_grid", "trace_grid", "ncu_name", "ncu_mangled", "trace_name"])
    for folder in map(Path, folders):
        model = folder.name
        ncu = export_names(folder / f"{model}.raw.csv")
        mangled_path = folder / f"{model}.raw.mangled.csv"
        mangled = export_names(mangled_path)["Kernel Name"].to_list() if mangled_path.exists() else None
        events = json.loads((folder / "trace.json").read_text())["traceEvents"]
        kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
        for i, (name, grid) in enumerate(ncu.iter_rows()):
            trace = kernels[i]
            out.writerow([model, i, grid, "({}, {}, {})".format(*trace["args"]["grid"]), name,
                          mangled[i] if mangled else "", trace["name"]])


if __name__ == "__main__":
    main(sys.argv[1:])
