#!/usr/bin/env bash
# Issue 24 on the H100: (1) which conv kernels ncu launches in conv_net.py's measured region compared with
# the PyTorch-profiler discovery (full names from the raw page of an unfiltered ncu pass, cuDNN warnings and
# errors logged in both), (2) kwh profile on the conv net with presets quick and roofline.
# Usage: OUT=dir bash tools/device/conv_h100.sh
set -uo pipefail
OUT=${OUT:?set OUT}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=examples/workloads/conv_net.py; A="--warmup 3 --iterations 1"
D=/tmp/convdiag; rm -rf $D /tmp/kwh-profile; mkdir -p $D
T0=$(date +%s); step() { echo "=== $* (t=$(( $(date +%s) - T0 ))s)"; }
nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())'
kernels() { python3 - "$1" <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
for e in ev:
    if e.get("cat") == "kernel" and ("xmma" in e["name"] or "cudnn" in e["name"].lower() or "Padding" in e["name"]):
        print(e["args"].get("grid"), e["args"].get("block"), e["name"][:160])
PY
}
step discovery x2 '(cuDNN log level 2)'
for i in 1 2; do
  CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$D/cudnn_discovery$i.log python3 src/kwarehouse/collect/torch_discovery.py \
    --trace $D/discovery$i.trace.json --profiler-api -- $W $A > $D/discovery$i.log 2>&1
  kernels $D/discovery$i.trace.json > $D/discovery$i.convs.txt
done
step ncu unfiltered, measured range, clock control base
CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=$D/cudnn_ncu.log ncu --force-overwrite --export $D/range --kernel-name-base demangled \
  --profile-from-start off --clock-control base --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size python3 $W $A > $D/ncu_range.log 2>&1
ncu --import $D/range.ncu-rep --csv --page raw > $D/range.raw.csv
ncu --import $D/range.ncu-rep --csv --page raw --print-kernel-base mangled > $D/range.raw.mangled.csv
python3 - $D/range.raw.csv > $D/ncu_range.convs.txt <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))[1:]
for r in rows:
    n = r["Kernel Name"]
    if "xmma" in n or "cudnn" in n.lower() or "Padding" in n:
        print(r["Grid Size"], r["Block Size"], n[:160])
PY
step ncu unfiltered, clock control none
ncu --profile-from-start off --clock-control none --kernel-name-base demangled --csv --metrics gpu__time_duration.sum \
  python3 $W $A > $D/ncu_range_noclock.csv 2>&1
step ncu with the old conv_quick regex
RX=$(python3 -c 'import json; print(json.load(open("tests/data/profile-h100/conv_quick/selection.json"))["regex"])')
ncu --profile-from-start off --kernel-name-base demangled --kernel-name "regex:$RX" --metrics gpu__time_duration.sum python3 $W $A > $D/ncu_oldregex.log 2>&1
ncu --profile-from-start off --kernel-name-base demangled --kernel-name "regex:implicit_gemm" --metrics gpu__time_duration.sum python3 $W $A > $D/ncu_implicit.log 2>&1
for f in $D/*.convs.txt; do echo "== $f"; cat $f; done
grep -c "==PROF== Profiling" $D/ncu_oldregex.log $D/ncu_implicit.log
grep '==PROF== Profiling' $D/ncu_implicit.log | cut -c1-150
grep -h -i "error\|warn" $D/cudnn_*.log | sort | uniq -c | head -20
step kwh profile conv
CN="--task inference --dtype fp16 --batch 32 --image-size 224 --seed 0 --warmup 3 --iterations 1"
P="python3 -m kwarehouse.collect"; R=/tmp/kwh-profile
timeout 150 $P -o $R/conv_quick --top 6 --no-profile-from-start $CN -- python3 $W ${CONVARGS:-}
echo "rc=$?"
timeout 150 $P -o $R/conv_roofline --cover 90 --top 8 --preset roofline --no-profile-from-start $CN -- python3 $W ${CONVARGS:-}
echo "rc=$?"
for d in conv_quick conv_roofline; do python3 -c "import json; m=json.load(open('$R/$d/ncu/manifest.json')); print('$d', m.get('selected_not_profiled'), m.get('notes'))"; ls $R/$d/*; done
step pack
tar czf $OUT/convdiag.tgz --exclude='*.ncu-rep' -C /tmp convdiag
tar czf $OUT/convprofile.tgz --exclude='*.ncu-rep' -C $R conv_quick conv_roofline
