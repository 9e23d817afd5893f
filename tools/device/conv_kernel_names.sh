#!/usr/bin/env bash
# Issue 24: which kernel names does ncu see in conv_net.py's measured region, next to the names the
# PyTorch-profiler discovery saw? Runs ncu with NO kernel filter (one metric, every launch) over the
# workload in several ways; each log's ==PROF== lines are the names. Usage: D=dir bash this
set -uo pipefail
D=${D:?set D}; mkdir -p $D
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=examples/workloads/conv_net.py
A="--warmup 3 --iterations 1"
names() { grep -o '==PROF== Profiling "[^"]*"' "$1" | sed 's/==PROF== Profiling //' | sort | uniq -c | sort -rn; }
python3 src/kwarehouse/collect/torch_discovery.py --trace $D/discovery.trace.json --profiler-api -- $W $A > $D/discovery.log 2>&1
python3 - $D/discovery.trace.json > $D/discovery.names.txt <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
c = collections.Counter(e["name"] for e in ev if e.get("cat") == "kernel")
for n, k in c.most_common(): print(k, n)
PY
# the region ncu --profile-from-start off profiles, no filter
ncu --profile-from-start off --metrics gpu__time_duration.sum --clock-control base python3 $W $A > $D/ncu_range.log 2>&1
names $D/ncu_range.log > $D/ncu_range.names.txt
# the same with the mangled/function names ncu prints
ncu --profile-from-start off --metrics gpu__time_duration.sum --print-kernel-base function python3 $W $A > $D/ncu_range_function.log 2>&1
names $D/ncu_range_function.log > $D/ncu_range_function.names.txt
# the whole run (warm-up too), no filter, no range
ncu --metrics gpu__time_duration.sum python3 $W $A > $D/ncu_whole.log 2>&1
names $D/ncu_whole.log > $D/ncu_whole.names.txt
# the run under the CUPTI-based torch profiler again, for run-to-run stability of the choice
python3 src/kwarehouse/collect/torch_discovery.py --trace $D/discovery2.trace.json --profiler-api -- $W $A > $D/discovery2.log 2>&1
for f in $D/*.names.txt; do echo "== $f"; grep -i 'xmma\|cudnn\|conv\|gemm\|implicit\|cutlass\|nchw\|nhwc' $f; done
rm -f $D/discovery2.trace.json
