"""Copy an ncu console text capture keeping only its first N profiled launches, line for line.

Used to make tests/data from real captures without inventing anything: every line before the first
launch (program output, the process line) and every line of the first N launches is copied unchanged;
the text stops where launch N+1 begins. A launch begins at its header line
("  kernel (grid)x(block), Context C, Stream S, Device D, CC X.Y"), or at the process line before it.
Usage: python tools/trim_ncu_text.py SRC DST N
"""

import sys

from kwarehouse.ingest.ncu_text import LAUNCH, PROCESS

src, dst, keep = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as handle:
    lines = handle.read().decode("utf-8").split("\n")[:-1]
out, kept = [], 0
for index, line in enumerate(lines):
    process_of_next = PROCESS.match(line) and index + 1 < len(lines) and LAUNCH.match(lines[index + 1])
    if LAUNCH.match(line) or process_of_next:
        if kept == keep:
            break
        kept += bool(LAUNCH.match(line))
    out.append(line)
with open(dst, "wb") as handle:
    handle.write(("\n".join(out) + "\n").encode("utf-8"))
