"""Copy an ncu CSV export keeping only its first N profiled launches, every kept line byte for byte.

Used to make tests/data and examples/runs from real exports without inventing anything: the header,
the units row (raw page) and every line of the kept launches are copied unchanged.
Usage: python tools/trim_export.py SRC DST N
"""

import csv
import io
import sys

src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as handle:
    lines = handle.read().split(b"\n")
out = []
for line in lines:
    if not line.strip():
        continue
    first = next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))), [""])
    launch = first[0] if first else ""
    # header ("ID"), units row (empty ID) and non-CSV preamble lines are always kept
    if not launch.isdigit() or int(launch) < keep:
        out.append(line)
with open(dst, "wb") as handle:
    handle.write(b"\n".join(out) + b"\n")
