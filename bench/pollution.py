"""The pollution score (issue 31, part 3): every polluted variant of every real export, ingested by
kwh next to a clean export, classified intact / refused / lost / crashed (tests/pollution.py defines
them). Prints the score per format and variant as a Markdown table, then every lost or crashed
variant with its file and what was lost, and writes both to --out.

    python bench/pollution.py                        # tests/data and ../shared (corpus tarballs, public samples)
    python bench/pollution.py --no-shared --out /tmp/score.md
    python bench/pollution.py --no-shared --per-format 1   # the smallest export of each format: minutes
    python bench/pollution.py --kinds bom,cut-mid-row --formats ncu-text
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

import pollution  # noqa: E402


def markdown(outcomes: list[pollution.Outcome]) -> str:
    rows = pollution.score_table(outcomes)
    total = Counter()
    lines = ["| format | variant | intact | refused | lost or crashed |", "|---|---|---|---|---|"]
    for fmt, kind, counts in rows:
        bad = counts["lost"] + counts["crashed"]
        total.update(counts)
        crashed = f" ({counts['crashed']} crashed)" if counts["crashed"] else ""
        shown = f"**{bad}**" if bad else "0"
        lines.append(f"| {fmt} | {kind} | {counts['intact']} | {counts['refused']} | {shown}{crashed} |")
    bad = total["lost"] + total["crashed"]
    lines.append(f"| **all** | **{sum(total.values())} variants** | **{total['intact']}** | **{total['refused']}** | "
                 f"**{bad}** ({total['crashed']} crashed) |")
    return "\n".join(lines)


def failures(outcomes: list[pollution.Outcome]) -> str:
    bad = sorted((o for o in outcomes if o.bad), key=lambda o: (o.variant.source.format, o.variant.kind, o.variant.id))
    return "\n".join(f"- `{o.variant.source.label}` {o.variant.kind} ({o.variant.note}): **{o.verdict}**: {o.reason}"
                     for o in bad)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-shared", action="store_true", help="only tests/data, not ../shared")
    parser.add_argument("--kinds", help="comma-separated variant kinds (default: all)")
    parser.add_argument("--formats", help="comma-separated formats (default: all)")
    parser.add_argument("--per-format", type=int, metavar="N",
                        help="only the N smallest exports of each format (a quicker sample)")
    parser.add_argument("--out", type=Path, help="write the table and the failure list here too")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="kwh-pollution-") as scratch:
        scratch = Path(scratch)
        sources = pollution.find_sources(shared=not args.no_shared, scratch=scratch)
        if args.formats:
            sources = [s for s in sources if s.format in args.formats.split(",")]
        if args.per_format:
            by_format: dict[str, list] = {}
            for source in sorted(sources, key=lambda s: s.path.stat().st_size):
                by_format.setdefault(source.format, []).append(source)
            sources = [s for group in by_format.values() for s in group[:args.per_format]]
        kinds = args.kinds.split(",") if args.kinds else None
        unusable: list[str] = []

        def progress(outcome: pollution.Outcome) -> None:
            if outcome.reason.startswith("source not usable"):
                if outcome.variant.source.label not in unusable:
                    unusable.append(outcome.variant.source.label)
                    print(f"  (not a source: {outcome.variant.source.label}: {outcome.reason})", file=sys.stderr)
                return
            print(f"{outcome.verdict:8} {outcome.variant.id}", file=sys.stderr, flush=True)

        outcomes = pollution.run_all(sources, scratch, kinds, progress)
    outcomes = [o for o in outcomes if not o.reason.startswith("source not usable")]
    elapsed = time.time() - started
    used = sorted({o.variant.source.label for o in outcomes})
    text = (f"{len(used)} real exports, {len(outcomes)} variants, {elapsed:.0f} s\n\n{markdown(outcomes)}\n\n"
            f"Lost or crashed:\n\n{failures(outcomes) or '(none)'}\n\nNot sources (refused or empty when clean): "
            f"{', '.join(unusable) or 'none'}\n")
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
