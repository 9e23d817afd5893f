#!/usr/bin/env bash
# Real fp8/bf16 GEMM exports for issue 18, on a GPU machine with ncu (run through the device tool):
# ncu raw/details CSV + console text with the tensor roofline section, a PyTorch trace of the same
# workload with nvidia-smi and NVML samples beside it, and the tensor metrics this ncu knows.
set -euo pipefail
OUT=${OUT:?set OUT}
D=/tmp/fp8_gemm; mkdir -p "$D"
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name())' | tee "$D/versions.txt"
ncu --version >> "$D/versions.txt"
nvidia-smi -q > "$D/nvidia-smi-q.txt"
ncu --query-metrics --chip gh100 > "$D/ncu_query_metrics_gh100.txt" 2>&1 || true
SECTIONS="--section SpeedOfLight --section SpeedOfLight_RooflineChart --section SpeedOfLight_HierarchicalTensorRooflineChart --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section InstructionStats"
[ -s "$D/fp8_gemm.ncu-rep" ] || ncu --profile-from-start off --nvtx --clock-control none $SECTIONS -o "$D/fp8_gemm" -f \
    python3 tools/fp8_workload.py --mode ncu > "$D/ncu.log" 2>&1
ncu --import "$D/fp8_gemm.ncu-rep" --csv --page raw > "$D/fp8_gemm.raw.csv"
ncu --import "$D/fp8_gemm.ncu-rep" --csv --page details > "$D/fp8_gemm.details.csv"
ncu --import "$D/fp8_gemm.ncu-rep" > "$D/fp8_gemm.ncu-console.txt"
# the trace run, with telemetry sampled beside it
nvidia-smi --query-gpu=timestamp,index,name,pci.bus_id,utilization.gpu,utilization.memory,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used,clocks_throttle_reasons.active --format=csv -lms 100 > "$D/nvidia-smi-query.csv" &
SMI=$!
python3 - "$D/nvml-samples.csv" <<'PY' &
import csv, sys, time
import pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
with open(sys.argv[1], "w", newline="") as f:
    w = csv.writer(f); w.writerow(["timestamp_ns", "gpu_index", "sm_clock_mhz", "mem_clock_mhz", "power_mw", "gpu_util_pct", "mem_util_pct", "temperature_c", "throttle_reasons"])
    end = time.time() + 25
    while time.time() < end:
        u = pynvml.nvmlDeviceGetUtilizationRates(h)
        w.writerow([time.time_ns(), 0, pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM), pynvml.nvmlDeviceGetPowerUsage(h), u.gpu, u.memory, pynvml.nvmlDeviceGetTemperature(h, 0), pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)])
        time.sleep(0.05)
PY
NVML=$!
sleep 2
python3 tools/fp8_workload.py --mode trace --out "$D/trace.json" > "$D/torchprof.log" 2>&1
sleep 2; kill $SMI || true; wait $NVML || true
rm -f "$D/fp8_gemm.ncu-rep.bak"
tar -C /tmp -czf "$OUT/fp8_gemm.tar.gz" fp8_gemm && ls -la "$D"
