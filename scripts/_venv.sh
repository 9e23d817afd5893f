# Sourced by demo.sh and test.sh: make .venv (Python >= 3.11) and install kwarehouse into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kwarehouse needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# The install is editable (code changes need none), so it is redone only when pyproject.toml changed or
# other extras are wanted: demo.sh run by the test suite, and every rerun, would spend ~10 s in pip.
# .venv/kwh-installed lists "<sha256 of pyproject.toml> <extras>" for each install done; any extras
# include the plain install.
stamp=.venv/kwh-installed
key="$("$PY" -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
if [ -z "$1" ]; then
    grep -q "^$key " "$stamp" 2>/dev/null && installed=yes || installed=no
else
    grep -qxF "$key $1" "$stamp" 2>/dev/null && installed=yes || installed=no
fi
if [ "$installed" = no ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".$1"
    echo "$key $1" >> "$stamp"
fi
