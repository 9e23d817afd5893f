"""Every library kwarehouse's code imports is one that `pip install .` brings, or an optional one that an
extra names (or, for torch and pynvml, the GPU machine that kwh profile runs on has). The test venv has
the test extra's packages too (pandas brings numpy), so a missing dependency would only show in a fresh
`./scripts/demo.sh` (numpy did: the batched ncu ingest imported it undeclared)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# imported only inside the functions that need them, with a clear error when absent
OPTIONAL = {"pyspark": "spark", "ncu_report": "ncu-rep", "mcp": "mcp (kwh mcp)",
            "torch": "the GPU machine of kwh profile (PyTorch discovery)",
            "pynvml": "the GPU machine of kwh profile (NVML sampler)"}


def imported_top_level_modules() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / "src" / "kwarehouse").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                found.setdefault(module.split(".")[0], set()).add(path.relative_to(ROOT).as_posix())
    return found


def requirement_name(text: str) -> str:
    return re.split(r"[<>=!~\[; ]", text, maxsplit=1)[0].lower().replace("_", "-")


def test_every_imported_library_is_a_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {requirement_name(r) for r in project["dependencies"]}
    distributions = packages_distributions()
    undeclared = {}
    for module, files in imported_top_level_modules().items():
        if module in sys.stdlib_module_names or module == "kwarehouse" or module in OPTIONAL:
            continue
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & declared:
            undeclared[module] = sorted(files)
    assert not undeclared, f"imported but not in pyproject's dependencies: {undeclared}"
    extras = {requirement_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    assert {"pyspark", "ncu-report"} <= extras
