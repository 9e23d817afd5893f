# Sourced by demo.sh and test.sh: make .venv (Python >= 3.11) and install kwarehouse into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kwarehouse needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".$1"
