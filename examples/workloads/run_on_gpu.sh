#!/usr/bin/env bash
# The real runs behind tests/data/profile-h100 (issue 24), on a GPU machine with ncu and PyTorch but no
# nsys: kwh profile (as `python3 -m kwarehouse.collect`, which needs only click and the standard library)
# on the example workloads with two presets, the non-Python discovery path (ncu durations), --invocation,
# a regex that matches nothing, the regex dialect ncu accepts, and the passes each preset costs.
# Usage, from the repository root: OUT=dir [PARTS="transformer conv invocation nothing dialect passes"] \
#   bash examples/workloads/run_on_gpu.sh        (PARTS: which of the steps below to run; default all)
set -uo pipefail
OUT=${OUT:?set OUT}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
P="python3 -m kwarehouse.collect"
W=examples/workloads
R=/tmp/kwh-profile; rm -rf $R; mkdir -p $R/probe
T0=$(date +%s); left() { echo $(( ${BUDGET:-540} - ($(date +%s) - T0) )); }
step() { echo "=== $* (t=$(( $(date +%s) - T0 ))s)"; }
{ nvidia-smi -L; ncu --version; python3 -c 'import torch, cupy; print(torch.__version__, cupy.__version__)'; which nsys; } > $R/probe/machine.txt 2>&1
ncu --list-sections > $R/probe/ncu_list_sections.txt 2>&1
for c in profiling launch device; do ncu --query-metrics --query-metrics-collection $c > $R/probe/ncu_query_metrics_$c.txt 2>&1; done
cat $R/probe/machine.txt

PARTS=${PARTS:-transformer conv invocation nothing dialect passes}
TB="--task inference --dtype bf16 --batch 8 --seq-len 512 --seed 0 --warmup 3 --iterations 1"
CN="--task inference --dtype fp16 --batch 32 --image-size 224 --seed 0 --warmup 3 --iterations 1"
if [[ $PARTS == *transformer* ]]; then
step "transformer quick (clock control base)"
timeout 150 $P -o $R/transformer_quick --top 6 --no-profile-from-start $TB -- python3 $W/transformer_block.py
echo "rc=$?"
if [ ! -s $R/transformer_quick/ncu/transformer_block.raw.csv ]; then
  step transformer quick, clock control none "(base failed)"
  timeout 150 $P -o $R/transformer_quick --top 6 --no-profile-from-start --clock-control none $TB -- python3 $W/transformer_block.py
  echo "rc=$?"; CLOCK="--clock-control none"
fi
step transformer roofline
timeout 150 $P -o $R/transformer_roofline --cover 90 --top 8 --preset roofline --no-profile-from-start ${CLOCK:-} $TB -- python3 $W/transformer_block.py
echo "rc=$?"
fi
if [[ $PARTS == *conv* ]]; then
step conv quick
timeout 150 $P -o $R/conv_quick --top 6 --no-profile-from-start ${CLOCK:-} $CN -- python3 $W/conv_net.py
echo "rc=$?"
step conv roofline
timeout 150 $P -o $R/conv_roofline --cover 90 --top 8 --preset roofline --no-profile-from-start ${CLOCK:-} $CN -- python3 $W/conv_net.py
echo "rc=$?"
fi
if [[ $PARTS == *invocation* ]]; then
step "custom kernel: ncu durations discovery, --invocation 2 of 3 iterations"
timeout 90 $P -o $R/custom_invocation --discovery ncu --invocation 2 --no-profile-from-start ${CLOCK:-} --dtype fp32 --seed 0 --warmup 2 --iterations 3 -- python3 $W/custom_kernel.py --iterations 3
echo "rc=$?"
fi
if [[ $PARTS == *nothing* ]]; then
step regex that matches nothing
timeout 60 $P -o $R/custom_nothing --kernel-regex '^no_such_kernel$' --no-profile-from-start ${CLOCK:-} -- python3 $W/custom_kernel.py
echo "rc=$?"
fi
if [[ $PARTS == *dialect* ]]; then
step regex dialect
for rx in 'saxpy' '^saxpy$' '^(void )?(([A-Za-z0-9_]+|<unnamed>|[(]anonymous namespace[)])::)*(saxpy|sgemm_tiled)([<(].*)?$' '^sgemm'; do
  n=$(ncu --kernel-name-base demangled --kernel-name "regex:$rx" --metrics gpu__time_duration.sum --profile-from-start off ${CLOCK:-} python3 $W/custom_kernel.py 2>&1 | grep -c '==PROF== Profiling')
  echo "regex:$rx -> $n launches" | tee -a $R/probe/regex_dialect.txt
done
fi
if [[ $PARTS == *passes* ]]; then
step passes per preset
for preset in quick memory occupancy roofline detailed portable; do
  [ $(left) -lt 40 ] && { echo "skip $preset (time)"; continue; }
  timeout 60 $P -o $R/passes_$preset --preset $preset --discovery ncu --invocation 1 --no-profile-from-start ${CLOCK:-} -- python3 $W/custom_kernel.py > $R/passes_$preset.out 2>&1
  echo "$preset rc=$? $(grep -ho '".*" - [0-9]*.*passes' $R/passes_$preset/logs/ncu.log | tr '\n' ';')" | tee -a $R/probe/passes.txt
done
fi
step pack
cd $R
tar czf $OUT/probe.tgz --exclude='*.ncu-rep' probe $(ls -d passes_* custom_* 2>/dev/null)
for d in transformer_quick transformer_roofline conv_quick conv_roofline; do [ -d $d ] && tar czf $OUT/$d.tgz --exclude='*.ncu-rep' $d; done
tar czf $OUT/reps.tgz $(ls */ncu/*.ncu-rep 2>/dev/null | grep -v passes_)
ls -la $OUT
