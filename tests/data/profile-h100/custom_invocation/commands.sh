#!/bin/sh
# kwh profile: every command it ran, in order
/usr/local/cuda/bin/ncu --force-overwrite --export /tmp/kwh-profile/custom_invocation/discovery/durations --metrics gpu__time_duration.sum --replay-mode kernel --clock-control base --profile-from-start off --nvtx python3 examples/workloads/custom_kernel.py --iterations 3
/usr/local/cuda/bin/ncu --import /tmp/kwh-profile/custom_invocation/discovery/durations.ncu-rep --csv --page raw > /tmp/kwh-profile/custom_invocation/discovery/durations.raw.csv
/usr/local/cuda/bin/ncu --force-overwrite --export /tmp/kwh-profile/custom_invocation/ncu/custom_kernel --kernel-name-base function --kernel-id '::regex:^(saxpy|sgemm_tiled)$:2' --replay-mode kernel --clock-control base --profile-from-start off --nvtx --section SpeedOfLight python3 examples/workloads/custom_kernel.py --iterations 3
/usr/local/cuda/bin/ncu --import /tmp/kwh-profile/custom_invocation/ncu/custom_kernel.ncu-rep --csv --page raw > /tmp/kwh-profile/custom_invocation/ncu/custom_kernel.raw.csv
/usr/local/cuda/bin/ncu --import /tmp/kwh-profile/custom_invocation/ncu/custom_kernel.ncu-rep --csv --page details > /tmp/kwh-profile/custom_invocation/ncu/custom_kernel.details.csv
