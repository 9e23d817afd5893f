"""Run a Python script or module as it is, with no profiler attached, and time it (kwh profile's
un-profiled timing, which the launch_bound view compares with the trace's idle time). Executed as a
file by the workload's own interpreter, like torch_discovery.py, so it imports nothing of kwarehouse:

    python3 timed_run.py --out TIMING.json -- SCRIPT.py ARGS...
    python3 timed_run.py --out TIMING.json -- -m MODULE ARGS...

It times what `kwh profile --no-profile-from-start` profiles: the wall time between the script's
torch.cuda.profiler.start() and stop() (or CuPy's cupy.cuda.profiler.start()/stop()), the GPU synchronized
at both ends, summed over the regions. TIMING.json: {"seconds", "regions", "script_seconds", "sync_error"} ("seconds"
null when the script opened no region; script_seconds: its whole run, for the log; sync_error: why the final
synchronize failed, else null).
"""

import os
import sys

# Run as a file, this script's folder (kwarehouse/collect) is sys.path[0], ahead of the standard library
# (torch_discovery.py says why that broke workloads): dropped before anything else is imported.
if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import runpy  # noqa: E402
import time  # noqa: E402


def _synchronize() -> None:
    """Wait for the GPU, through whichever of torch and CuPy the workload imported."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.cuda.runtime.deviceSynchronize()


class _Regions:
    """Replaces a profiler module's start()/stop() with ones that time the region and then call the
    originals (cudaProfilerStart/Stop, a no-op without a profiler), so the workload runs as before."""

    def __init__(self):
        self.seconds, self.regions, self.started = 0.0, 0, None

    def patch(self, module) -> None:
        start, stop = module.start, module.stop

        def timed_start(*args, **kwargs):
            if self.started is None:
                _synchronize()
                self.started = time.perf_counter()
            return start(*args, **kwargs)

        def timed_stop(*args, **kwargs):
            if self.started is not None:
                _synchronize()
                self.seconds += time.perf_counter() - self.started
                self.regions += 1
                self.started = None
            return stop(*args, **kwargs)

        module.start, module.stop = timed_start, timed_stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    while command and command[0].startswith("-") and command[0] not in ("-m", "-c"):
        command = command[1:]                   # interpreter flags (-u, -O): meaningless here
    if not command:
        parser.error("no script or -m MODULE to run")

    regions = _Regions()
    # the same calls ncu --profile-from-start off waits for; patched where installed (a broken install is the
    # workload's to meet: its own import says so)
    for package, module in (("torch", "torch.cuda.profiler"), ("cupy", "cupy.cuda.profiler")):
        if importlib.util.find_spec(package) is not None:
            try:
                regions.patch(importlib.import_module(module))
            except ImportError:
                pass
    if command[0] == "-c":
        sys.argv = ["-c", *command[2:]]
        code = command[1]
        run = lambda: exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})  # noqa: E731
    elif command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        run = lambda: runpy.run_module(command[1], run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        sys.argv = command
        sys.path.insert(0, os.path.dirname(os.path.abspath(command[0])))   # what `python SCRIPT` puts first
        run = lambda: runpy.run_path(command[0], run_name="__main__")  # noqa: E731
    status = 0
    began = time.perf_counter()
    try:
        run()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        # only script_seconds (for the log) waits on this: the regions synchronize themselves; a GPU the
        # workload left in error is recorded beside the timing rather than raised over the workload's own failure
        sync_error = None
        try:
            _synchronize()
        except Exception as exc:
            sync_error = f"{type(exc).__name__}: {exc}"
            print(f"kwh timed run: the GPU could not be synchronized at the end ({sync_error})", file=sys.stderr)
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump({"seconds": regions.seconds if regions.regions else None, "regions": regions.regions,
                       "script_seconds": time.perf_counter() - began, "sync_error": sync_error}, out)
            out.write("\n")
    sys.exit(status)


if __name__ == "__main__":
    main()
