#!/bin/sh
# kwh profile: every command it ran, in order
python3 /work/main/build/h-profile/src/kwarehouse/collect/torch_discovery.py --trace /tmp/r/mlp/discovery/trace.json --from-start -- /tmp/tmp.ypQ0cRIhLC/compiled_mlp_cprofile.py
/usr/local/cuda/bin/ncu --force-overwrite --export /tmp/r/mlp/ncu/compiled_mlp_cprofile --kernel-name-base function --kernel-name 'regex:^(nvjet_sm90_hsh_48x64_64x15_4x1_v_bz_bias_TNN|nvjet_sm90_hsh_64x32_64x16_4x2_h_bz_splitK_bias_TNT|triton_poi_fused_gelu_0|vectorized_elementwise_kernel)$' --launch-skip 2 --launch-count 6 --replay-mode kernel --clock-control base --nvtx --section SpeedOfLight python3 /tmp/tmp.ypQ0cRIhLC/compiled_mlp_cprofile.py
/usr/local/cuda/bin/ncu --import /tmp/r/mlp/ncu/compiled_mlp_cprofile.ncu-rep --csv --page raw > /tmp/r/mlp/ncu/compiled_mlp_cprofile.raw.csv
/usr/local/cuda/bin/ncu --import /tmp/r/mlp/ncu/compiled_mlp_cprofile.ncu-rep --csv --page details > /tmp/r/mlp/ncu/compiled_mlp_cprofile.details.csv
