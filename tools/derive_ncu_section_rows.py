"""Derive src/kwarehouse/ingest/ncu_section_rows.csv: the metric rows ncu writes in each section of a
details page, in order, from real details pages (every distinct layout seen is kept).

ncu writes each section's metric rows whole, the same for every launch of one report; a page cut
inside its only (or last) launch leaves that launch's last section with a leading part of its rows.
The readers compare that section with the layouts listed here (ncu_details_csv.reject_cut_last_launch).
Sections whose rows the user chooses (--metrics: "Command line profiler metrics") are not listed.

    python tools/derive_ncu_section_rows.py tests/data /path/to/extracted/corpus ... > src/kwarehouse/ingest/ncu_section_rows.csv
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kwarehouse import ingest  # noqa: E402
from kwarehouse.errors import InputError  # noqa: E402

USER_SECTIONS = {"Command line profiler metrics"}
SEPARATOR = "; "


def layouts(path: Path) -> set[tuple[str, tuple[str, ...]]]:
    result = ingest.read(path, format="ncu-details-csv")
    found = set()
    for (launch,), rows in result.metrics.group_by("launch_id", maintain_order=True):
        sections: list[tuple[str, list[str]]] = []
        for section, metric in rows.select("section", "metric").iter_rows():
            if not sections or sections[-1][0] != section:
                sections.append((section, []))
            sections[-1][1].append(metric)
        for section, metrics in sections:
            if section not in USER_SECTIONS and not any(SEPARATOR.strip() in m for m in metrics):
                found.add((section, tuple(metrics)))
    return found


def main() -> int:
    found: dict[tuple[str, tuple[str, ...]], str] = {}
    for root in map(Path, sys.argv[1:]):
        for path in sorted(root.rglob("*.csv")):
            if "bad" in path.parts or ingest.sniff(path) is None or ingest.sniff(path).name != "ncu-details-csv":
                continue
            try:
                for layout in layouts(path):
                    found.setdefault(layout, path.name)
            except InputError:
                continue
    out = csv.writer(sys.stdout, lineterminator="\n")
    print("# The metric rows ncu writes in each section of a details page, in order: every distinct layout seen")
    print("# in real pages (first seen in `example`). DERIVED by tools/derive_ncu_section_rows.py from the details")
    print("# pages of tests/data and the corpus (ncu 2025.3, H100 and RTX 5090; labels and --print-metric-name name).")
    out.writerow(["section", "rows", "example", "metrics"])
    for (section, metrics), example in sorted(found.items()):
        out.writerow([section, len(metrics), example, SEPARATOR.join(metrics)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
