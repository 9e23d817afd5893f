"""Run a Python script or module under the PyTorch profiler and save its Chrome trace (kwh profile's
discovery pass for Python commands). Executed as a file by the workload's own interpreter, so it
imports nothing of kwarehouse:

    python3 torch_discovery.py --trace OUT.json --from-start|--profiler-api -- SCRIPT.py ARGS...
    python3 torch_discovery.py --trace OUT.json --from-start -- -m MODULE ARGS...

--from-start records the whole run. --profiler-api records between the script's
torch.cuda.profiler.start() and stop() (the calls that cudaProfilerStart/Stop ncu's
--profile-from-start off waits for), so discovery sees the same region the ncu pass profiles.
"""

import os
import sys

# Run as a file, this script's folder (kwarehouse/collect) is sys.path[0], ahead of the standard library:
# a module beside it would stand in for any the workload imports by that name (collect/profile.py once
# shadowed the standard library's profile, which cProfile needs, and transformers and torch.compile
# import cProfile: "module 'profile' has no attribute 'run'"). Dropped before anything else is imported;
# `python -P` would do the same, but only from Python 3.11, and this runs on the workload's interpreter.
if sys.path and os.path.realpath(sys.path[0] or os.curdir) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]

import argparse  # noqa: E402
import json  # noqa: E402
import runpy  # noqa: E402


class _no_nvtx:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--from-start", action="store_true")
    mode.add_argument("--profiler-api", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    while command and command[0].startswith("-") and command[0] not in ("-m", "-c"):
        command = command[1:]                   # interpreter flags (-u, -O): meaningless here
    if not command:
        parser.error("no script or -m MODULE to run")

    import torch
    from torch.profiler import ProfilerActivity, profile

    profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True)
    state = {"running": False, "done": False}

    def start():
        if not state["running"] and not state["done"]:
            profiler.start()
            state["running"] = True

    def stop():
        if state["running"]:
            torch.cuda.synchronize()
            profiler.stop()
            state["running"], state["done"] = False, True

    # emit_nvtx (which workloads use to give ncu's --nvtx the op names) is a profiler of its own, and two
    # cannot run on one thread ("Profiler is already enabled on this thread"): a no-op here
    torch.autograd.profiler.emit_nvtx = _no_nvtx
    if args.profiler_api:
        # the workload's measured region: the same calls ncu --profile-from-start off waits for
        torch.cuda.profiler.start = start
        torch.cuda.profiler.stop = stop
    else:
        start()
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
    try:
        run()
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        stop()
    if not state["done"]:
        print("torch_discovery: the profiler never started: the command did not call "
              "torch.cuda.profiler.start()", file=sys.stderr)
        sys.exit(status or 3)
    profiler.export_chrome_trace(args.trace)
    print(json.dumps({"torch_discovery": args.trace, "torch": torch.__version__,
                      "cuda": torch.version.cuda}), file=sys.stderr)
    sys.exit(status)


if __name__ == "__main__":
    main()
