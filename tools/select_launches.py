"""Copy an ncu CSV export (raw or details page) keeping only the launches whose IDs are listed, every kept line
byte for byte: tools/trim_export.py for launches that are not the first N.

Used to make tests/data/verdicts-ncu-h100 from the corpus without inventing anything: the header, the units
row (raw page) and every line of the chosen launches are copied unchanged.
Usage: python tools/select_launches.py SRC DST ID[,ID...]
"""

import csv
import io
import sys

src, dst, wanted = sys.argv[1], sys.argv[2], {int(i) for i in sys.argv[3].split(",")}
with open(src, "rb") as handle:
    lines = handle.read().split(b"\n")
out = []
for line in lines:
    if not line.strip():
        continue
    first = next(csv.reader(io.StringIO(line.decode("utf-8", "replace"))), [""])
    launch = first[0] if first else ""
    # header ("ID"), units row (empty ID) and non-CSV preamble lines are always kept
    if not launch.isdigit() or int(launch) in wanted:
        out.append(line)
with open(dst, "wb") as handle:
    handle.write(b"\n".join(out) + b"\n")
