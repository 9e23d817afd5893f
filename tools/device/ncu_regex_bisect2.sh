#!/usr/bin/env bash
# Issue 24, second round: kwh's conv selection regex against variants, each launch listed with its grid
# from the raw page (so a launch ncu names wrongly shows), and the effect of CUDA_MODULE_LOADING=EAGER.
set -uo pipefail
D=${D:?set D}; mkdir -p $D
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=examples/workloads/conv_net.py; A="--warmup 3 --iterations 1"
N64=sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn
N128=sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn
F=sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_tensor1688_execute_kernel_kernel__5x_cudnn
PRE='^(void |std::enable_if<.*>::type )?(([A-Za-z0-9_]+|<unnamed>|[(]anonymous namespace[)])::)*'
OLD=$(python3 -c 'import json; print(json.load(open("tests/data/profile-h100/conv_quick/selection.json"))["regex"])')
one() {  # name env base regex
  local n=$1 e=$2 b=$3 rx=$4
  env $e ncu --force-overwrite --export $D/$n --profile-from-start off --kernel-name-base $b --kernel-name "regex:$rx" \
    --metrics gpu__time_duration.sum python3 $W $A > $D/$n.log 2>&1
  ncu --import $D/$n.ncu-rep --csv --page raw > $D/$n.raw.csv 2>/dev/null
  echo "[$n] $e base=$b $(grep -c '==PROF== Profiling' $D/$n.log) launches regex:${rx:0:120}"
  python3 - $D/$n.raw.csv <<'PY'
import csv, sys
try: rows = list(csv.DictReader(open(sys.argv[1])))[1:]
except Exception as e: rows = []; print("   no raw page", e)
for r in rows:
    n = r["Kernel Name"]
    if "xmma" in n: print("   ", r["ID"], r["Grid Size"], n.replace("sm90_xmma_fprop_", "")[:60])
print("    other:", sum("xmma" not in r["Kernel Name"] for r in rows))
PY
}
one old1 X=1 demangled "$OLD"
one old2 X=1 demangled "$OLD"
one old_eager CUDA_MODULE_LOADING=EAGER demangled "$OLD"
one f_n64 X=1 demangled "^($F|$N64)\$"
one f_n64_eager CUDA_MODULE_LOADING=EAGER demangled "^($F|$N64)\$"
one cudnn3 X=1 demangled "^($F|$N128|$N64)\$"
one no_f X=1 demangled "${PRE}(batch_norm_transform_input_channels_last_kernel|max_pool_forward_nhwc|$N128|$N64|vectorized_elementwise_kernel)([<(].*)?\$"
one func X=1 function "^(batch_norm_transform_input_channels_last_kernel|max_pool_forward_nhwc|$F|$N128|$N64|vectorized_elementwise_kernel)\$"
rm -f $D/*.ncu-rep
