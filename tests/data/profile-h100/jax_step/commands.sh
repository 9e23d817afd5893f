#!/bin/sh
# kwh profile: every command it ran, in order
python3 /work/main/build/h-profile/src/kwarehouse/collect/torch_discovery.py --trace /tmp/r/jax/discovery/trace.json --from-start -- /tmp/tmp.ypQ0cRIhLC/jax_step.py
/usr/local/cuda/bin/ncu --force-overwrite --export /tmp/r/jax/ncu/jax_step --kernel-name-base function --kernel-name 'regex:^(fusion_1|gemm_fusion_dot_1|gemm_fusion_dot_2|nvjet_sm90_tss_64x128_64x8_2x1_v_bz_TNN)$' --launch-count 6 --replay-mode kernel --clock-control base --profile-from-start off --nvtx --section SpeedOfLight python3 /tmp/tmp.ypQ0cRIhLC/jax_step.py
/usr/local/cuda/bin/ncu --import /tmp/r/jax/ncu/jax_step.ncu-rep --csv --page raw > /tmp/r/jax/ncu/jax_step.raw.csv
/usr/local/cuda/bin/ncu --import /tmp/r/jax/ncu/jax_step.ncu-rep --csv --page details > /tmp/r/jax/ncu/jax_step.details.csv
