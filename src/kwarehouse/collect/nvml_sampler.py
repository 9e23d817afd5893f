"""kwh profile's NVML sampler: writes kwh's NVML sample file (kwarehouse.ingest.nvml_samples.COLUMNS, CSV)
while a profiled command runs, until stopped (SIGTERM/SIGINT) or --seconds pass: every GPU every
--interval-ms, with NVML GPM metrics (SM activity and occupancy, tensor and DRAM activity; Hopper and
later) where the GPU supports them. Each GPM value is computed between the previous sample and this
one: the row describes (previous timestamp, timestamp]. It is also issue 25's reference writer (run on an H100
by tools/gen_telemetry.sh). Run as a file, by kwh profile too, so that it needs only pynvml (from
nvidia-ml-py) on the GPU machine; COLUMNS repeats kwarehouse.ingest.nvml_samples.COLUMNS for that
reason (tests/test_telemetry.py checks they are equal).
"""

import argparse
import csv
import signal
import sys
import time

import pynvml

COLUMNS = ("timestamp_ns", "gpu_index", "gpu_uuid", "gpu_name", "sm_clock_mhz", "mem_clock_mhz", "power_mw",
           "gpu_util_pct", "mem_util_pct", "temperature_c", "memory_used_bytes", "throttle_reasons",
           "sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
GPM = {"sm_active_pct": "NVML_GPM_METRIC_SM_UTIL", "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
       "tensor_active_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "dram_active_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL"}


def gpm_supported(handle) -> bool:
    try:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except Exception:   # noqa: BLE001 - older driver or bindings: no GPM
        return False


def gpm_values(previous, current) -> dict:
    metrics = pynvml.c_nvmlGpmMetricsGet_t()
    metrics.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    metrics.numMetrics = len(GPM)
    metrics.sample1, metrics.sample2 = previous, current
    for i, name in enumerate(GPM.values()):
        metrics.metrics[i].metricId = getattr(pynvml, name)
    pynvml.nvmlGpmMetricsGet(metrics)
    return {column: metrics.metrics[i].value for i, column in enumerate(GPM)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--interval-ms", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=600)
    args = parser.parse_args()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    gpm = [gpm_supported(h) for h in handles]
    print(f"pynvml {getattr(pynvml, '__version__', '?')}, driver {pynvml.nvmlSystemGetDriverVersion()}, "
          f"GPM supported: {gpm}", file=sys.stderr)
    previous = [None] * len(handles)
    end = time.time() + args.seconds
    with open(args.out, "w", newline="") as handle_out:
        writer = csv.writer(handle_out, lineterminator="\n")
        writer.writerow(COLUMNS)
        while not stop and time.time() < end:
            for index, h in enumerate(handles):
                row = {"timestamp_ns": time.time_ns(), "gpu_index": index,
                       "gpu_uuid": pynvml.nvmlDeviceGetUUID(h), "gpu_name": pynvml.nvmlDeviceGetName(h)}
                util = pynvml.nvmlDeviceGetUtilizationRates(h)
                row.update(sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                           mem_clock_mhz=pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                           power_mw=pynvml.nvmlDeviceGetPowerUsage(h), gpu_util_pct=util.gpu,
                           mem_util_pct=util.memory,
                           temperature_c=pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                           memory_used_bytes=pynvml.nvmlDeviceGetMemoryInfo(h).used,
                           throttle_reasons=pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
                if gpm[index]:
                    sample = pynvml.nvmlGpmSampleAlloc()
                    pynvml.nvmlGpmSampleGet(h, sample)
                    if previous[index] is not None:
                        row.update({k: f"{v:.3f}" for k, v in gpm_values(previous[index], sample).items()})
                        pynvml.nvmlGpmSampleFree(previous[index])
                    previous[index] = sample
                writer.writerow([row.get(c, "") for c in COLUMNS])
            handle_out.flush()
            time.sleep(args.interval_ms / 1000)
    pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
