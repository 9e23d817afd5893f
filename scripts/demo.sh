#!/usr/bin/env bash
# Quick start 1: install, ingest the bundled real sample runs (examples/runs/), print a summary.
source "$(dirname "$0")/_venv.sh" ""
export KWH_WAREHOUSE=${KWH_WAREHOUSE:-warehouse}
.venv/bin/kwh ingest examples/runs
echo
.venv/bin/kwh summary
