#!/bin/bash
# Make real ncu exports the corpus lacks, on a GPU machine with ncu and CuPy (run through the device tool):
#  - stdout.details.csv: plain `ncu --csv` redirected to a file, so program output and ==PROF== lines
#    surround the CSV exactly as a user's redirect captures them;
#  - norules.details.csv: a details page exported with --print-rule-details no (check for Rule columns);
#  - raw.csv / details.csv of the same report, with ncu --version beside them.
# Usage: OUT=dir tools/device/make_ncu_stdout_exports.sh
set -u
D=${OUT:-/tmp/out}; mkdir -p $D
cat > /tmp/wl.py <<'PY'
import cupy as cp
print("workload: starting saxpy + reduction")
x = cp.arange(1 << 20, dtype=cp.float32); y = cp.ones_like(x)
z = 2.0 * x + y
print("sum =", float(z.sum()))
PY
ncu --version > $D/ncu_version.txt
ncu --csv --section SpeedOfLight --section Occupancy --launch-count 3 python3 /tmp/wl.py > $D/stdout.details.csv 2>&1; echo "stdout rc=$?"
ncu --section SpeedOfLight --section Occupancy --launch-count 3 -f -o /tmp/rep python3 /tmp/wl.py > $D/ncu.log 2>&1; echo "rep rc=$?"
ncu --import /tmp/rep.ncu-rep --csv --page details --print-rule-details no > $D/norules.details.csv 2>&1; echo "norules rc=$?"
ncu --import /tmp/rep.ncu-rep --csv --page raw > $D/raw.csv; ncu --import /tmp/rep.ncu-rep --csv --page details > $D/details.csv
ncu --help | grep -A3 -i 'print-rule-details\|print-details' > $D/help_excerpt.txt
nvidia-smi -L > $D/gpu.txt
head -c 600 $D/stdout.details.csv; echo; head -2 $D/norules.details.csv | cut -c1-400
