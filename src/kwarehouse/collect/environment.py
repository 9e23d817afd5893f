"""What the manifest records about the machine: GPU, SM arch, driver, CUDA, clocks and power state
(nvidia-smi), PyTorch and CUDA runtime versions (the workload's Python), host and date. Each probe
that fails leaves its keys out; none stops a profile."""

from __future__ import annotations

import platform
import re
import shutil
import socket
import subprocess
from datetime import datetime, timezone

# nvidia-smi --query-gpu fields -> manifest keys (units stripped: MHz, W)
SMI_FIELDS = {
    "name": "gpu", "driver_version": "driver", "compute_cap": "sm_arch", "pstate": "pstate",
    "clocks.sm": "sm_clock_mhz", "clocks.mem": "mem_clock_mhz", "clocks.max.sm": "max_sm_clock_mhz",
    "clocks.applications.graphics": "application_sm_clock_mhz", "power.limit": "power_limit_w",
    "persistence_mode": "persistence_mode", "compute_mode": "compute_mode",
}
PROBE_TIMEOUT_S = 120
TORCH_PROBE = ("import json, platform, torch; p = torch.cuda.get_device_properties(0) if torch.cuda.is_available() "
               "else None; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
               "'python': platform.python_version(), 'cudnn': str(torch.backends.cudnn.version()), "
               "'sm_count': p.multi_processor_count if p else None}))")


def run_text(argv: list[str], timeout: float = PROBE_TIMEOUT_S) -> tuple[int, str]:
    """(exit status, stdout + stderr) of a probe; (127, why) when it cannot start."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace")
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 126, str(exc)
    return done.returncode, done.stdout + done.stderr


def gpus(smi: str | None = None) -> tuple[list[str] | None, str]:
    """The GPUs `nvidia-smi -L` lists (None when nvidia-smi is missing or fails), and what it said."""
    smi = smi or shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found on PATH (no NVIDIA driver?)"
    status, text = run_text([smi, "-L"], timeout=60)
    found = [line.strip() for line in text.splitlines() if line.startswith("GPU ")]
    return (found if status == 0 else None), text.strip().splitlines()[0] if text.strip() else f"exit status {status}"


def gpu_facts(device: int = 0) -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    status, text = run_text([smi, f"--id={device}", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"])
    facts: dict = {}
    if status == 0 and text.strip():
        values = [v.strip() for v in text.strip().splitlines()[0].split(",")]
        for field, value in zip(SMI_FIELDS, values):
            if value and not value.startswith("[") and value not in ("N/A", "[N/A]"):
                number = re.fullmatch(r"([\d.]+) (MHz|W)", value)
                facts[SMI_FIELDS[field]] = (float(number.group(1)) if "." in number.group(1) else int(number.group(1))) \
                    if number else value
    status, text = run_text([smi])
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text) if status == 0 else None
    if cuda:
        facts["cuda_driver_api"] = cuda.group(1)
    return facts


def python_facts(python: str) -> dict:
    """torch, CUDA runtime, Python and cuDNN versions and the SM count, from the workload's interpreter."""
    import json
    status, text = run_text([python, "-c", TORCH_PROBE])
    line = next((l for l in reversed(text.splitlines()) if l.startswith("{")), None)
    if status != 0 or line is None:
        return {}
    return {k: v for k, v in json.loads(line).items() if v not in (None, "None")}


def ncu_version(ncu: str) -> str | None:
    """`ncu --version`'s text (kept as ncu_version.txt, which kwh reads)."""
    status, text = run_text([ncu, "--version"], timeout=60)
    return text if status == 0 and "Version" in text else None


def host_facts() -> dict:
    now = datetime.now(timezone.utc)
    return {"host": socket.gethostname(), "os": platform.platform(), "date": now.date().isoformat(),
            "started_at": now.isoformat(timespec="seconds")}
