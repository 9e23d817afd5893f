#!/bin/sh
# kwh profile: every command it ran, in order
python3 /work/main/src/kwarehouse/collect/torch_discovery.py --trace /tmp/region/discovery/trace.json --profiler-api -- examples/workloads/transformer_block.py --batch 1 --seq-len 32 --dim 256 --heads 4 --warmup 3 --iterations 5
python3 /work/main/src/kwarehouse/collect/timed_run.py --out /tmp/region/unprofiled-timing.json -- examples/workloads/transformer_block.py --batch 1 --seq-len 32 --dim 256 --heads 4 --warmup 3 --iterations 5
/usr/local/cuda/bin/ncu --force-overwrite --export /tmp/region/ncu/meta-llama--tiny-block --kernel-name-base function --kernel-name 'regex:^(cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0|nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT|vectorized_layer_norm_kernel)$' --launch-skip 2 --launch-count 12 --replay-mode kernel --clock-control base --profile-from-start off --nvtx --section SpeedOfLight python3 examples/workloads/transformer_block.py --batch 1 --seq-len 32 --dim 256 --heads 4 --warmup 3 --iterations 5
/usr/local/cuda/bin/ncu --import /tmp/region/ncu/meta-llama--tiny-block.ncu-rep --csv --page raw > /tmp/region/ncu/meta-llama--tiny-block.raw.csv
/usr/local/cuda/bin/ncu --import /tmp/region/ncu/meta-llama--tiny-block.ncu-rep --csv --page details > /tmp/region/ncu/meta-llama--tiny-block.details.csv
