"""Trim a PyTorch profiler trace (Chrome JSON) to its first N GPU events, for tests/data fixtures.

Keeps the header fields, every metadata event (ph "M"), and every event that starts before the
(N+1)-th GPU event (kernel, gpu_memcpy, gpu_memset) starts; the events kept are byte-for-byte the
trace's own (re-serialized as JSON, numbers as written). The CPU ops and runtime calls that launched
the kept kernels start before them, so every link survives. Usage:

    python tools/trim_torch_trace.py SRC.json DST.json N
"""

import json
import sys
from decimal import Decimal

GPU = {"kernel", "gpu_memcpy", "gpu_memset"}


def main(source: str, target: str, count: str) -> None:
    trace = json.load(open(source), parse_float=Decimal)
    events = trace["traceEvents"]
    starts = sorted(Decimal(e["ts"]) for e in events if e.get("cat") in GPU)
    cutoff = starts[int(count)] if int(count) < len(starts) else None
    kept = [e for e in events if e.get("ph") == "M" or cutoff is None or
            ("ts" in e and Decimal(e["ts"]) < cutoff)]
    trace["traceEvents"] = kept

    class Encoder(json.JSONEncoder):
        def default(self, value):
            return float(value) if isinstance(value, Decimal) else super().default(value)

    text = json.dumps(trace, cls=Encoder)
    open(target, "w").write(text)


if __name__ == "__main__":
    main(*sys.argv[1:4])
