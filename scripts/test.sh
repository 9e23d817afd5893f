#!/usr/bin/env bash
# Quick start 2: install with the test extra and run the test suite.
source "$(dirname "$0")/_venv.sh" "[test]"
.venv/bin/python -m pytest "$@"
