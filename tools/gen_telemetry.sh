#!/usr/bin/env bash
# Real GPU telemetry logs for issue 25, on a GPU machine (run through the device tool): nvidia-smi
# --query-gpu (csv with units, and csv,nounits with another field list), nvidia-smi dmon -o DT and
# pmon -o DT, kwh's NVML sample file with GPM metrics (src/kwarehouse/collect/nvml_sampler.py, run as a file), all sampled while
# tools/telemetry_workload.py runs bf16 GEMMs under the PyTorch profiler; plus a few seconds of a
# --format=csv,noheader log (which kwh must refuse). No DCGM on these machines.
set -uo pipefail
OUT=${OUT:?set OUT}
D=/tmp/telemetry_gemm; rm -rf "$D"; mkdir -p "$D"
nvidia-smi -q > "$D/nvidia-smi-q.txt"
python3 -c 'import torch, pynvml; print(torch.__version__, torch.cuda.get_device_name(), getattr(pynvml, "__version__", "?"))' > "$D/versions.txt" 2>&1
nvidia-smi --query-gpu=timestamp,index,name,uuid,utilization.gpu,utilization.memory,clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used,clocks_event_reasons.active --format=csv -lms 100 > "$D/nvidia-smi-query.csv" &
P1=$!
nvidia-smi --query-gpu=timestamp,index,pci.bus_id,pstate,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,memory.used,memory.total --format=csv,nounits -lms 200 > "$D/nvidia-smi-query-nounits.csv" &
P2=$!
nvidia-smi dmon -o DT -s pucvmet -d 1 > "$D/nvidia-smi-dmon.txt" &
P3=$!
nvidia-smi pmon -o DT -s um -d 1 > "$D/nvidia-smi-pmon.txt" &
P4=$!
python3 src/kwarehouse/collect/nvml_sampler.py "$D/nvml-samples.csv" --interval-ms 100 --seconds 60 2> "$D/nvml_sampler.log" &
P5=$!
sleep 2
python3 tools/telemetry_workload.py --out "$D/trace.json" --iterations 300 > "$D/workload.json" 2> "$D/workload.log"
sleep 2
kill -INT $P1 $P2 $P3 $P4 2>/dev/null; kill -TERM $P5 2>/dev/null; wait $P5
timeout 2 nvidia-smi --query-gpu=timestamp,name,utilization.gpu --format=csv,noheader -lms 500 > "$D/nvidia-smi-noheader.csv"
sleep 1
ls -la "$D"; cat "$D/versions.txt" "$D/workload.json" "$D/nvml_sampler.log"; tail -3 "$D/nvml-samples.csv"
tar -C /tmp -czf "$OUT/telemetry_gemm.tar.gz" telemetry_gemm
