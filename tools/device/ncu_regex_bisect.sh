#!/usr/bin/env bash
# Issue 24: which --kernel-name regex forms ncu matches against conv_net.py's cuDNN implicit-GEMM kernels
# (kwh's selection regex missed them while `regex:implicit_gemm` matched). One ncu pass per pattern, one
# metric; prints the pattern and the kernel functions ncu profiled. Usage: D=dir bash this
set -uo pipefail
D=${D:?set D}; mkdir -p $D
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
W=examples/workloads/conv_net.py; A="--warmup 3 --iterations 1"
N64=sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn
N128=sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn
F=sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_tensor1688_execute_kernel_kernel__5x_cudnn
PRE='^(void |std::enable_if<.*>::type )?(([A-Za-z0-9_]+|<unnamed>|[(]anonymous namespace[)])::)*'
i=0
while IFS= read -r rx; do
  i=$((i+1))
  ncu --profile-from-start off --kernel-name-base ${BASE:-demangled} --kernel-name "regex:$rx" --metrics gpu__time_duration.sum \
    python3 $W $A > $D/rx$i.log 2>&1
  echo "[$i] $(grep -c '==PROF== Profiling' $D/rx$i.log) launches  regex:$rx"
  grep -o '==PROF== Profiling "[^"]*"' $D/rx$i.log | sed 's/==PROF== Profiling //' | cut -c1-90 | sort | uniq -c | sed 's/^/      /'
  grep -i 'error\|warn\|invalid' $D/rx$i.log | head -3
done <<EOR
^$N64\$
$N64
^($N64)([<(].*)?\$
^(void )?(([A-Za-z0-9_]+|<unnamed>|[(]anonymous namespace[)])::)*($N64)([<(].*)?\$
$PRE($N64)([<(].*)?\$
^($F|$N64)\$
^($N128|$N64)\$
^sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64
tilesize64x64x64_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn\$
^sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1
^sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64
$F\$
sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc
EOR
