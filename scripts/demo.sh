#!/usr/bin/env bash
# Quick start 1: install, ingest the bundled real sample runs (examples/runs/), print a summary.
source "$(dirname "$0")/_venv.sh" ""
export KWH_WAREHOUSE=${KWH_WAREHOUSE:-warehouse}
.venv/bin/kwh ingest examples/runs
echo
.venv/bin/kwh summary
echo
echo "Where the GPU time goes, by bottleneck class (kwh sql -f queries/how_kernels_perform.sql):"
.venv/bin/kwh sql -f queries/how_kernels_perform.sql
echo
echo "Design signals (kwh query design_signals; kwh views lists every view):"
.venv/bin/kwh query design_signals --limit 8
echo
echo "How much of the real GPU time the ncu data covers (kwh query coverage):"
.venv/bin/kwh query coverage
