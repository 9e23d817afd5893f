#!/usr/bin/env bash
# Quick start 2: install with the test extra and run the test suite.
# The PostgreSQL catalog tests need a PostgreSQL server's binaries: as root on Debian/Ubuntu, this
# installs the distribution's package when they are missing (elsewhere those tests are skipped).
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing PostgreSQL for the catalog tests (apt-get install postgresql)" >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
            || echo "could not install PostgreSQL; its tests will be skipped" >&2
    fi
fi
source "$(dirname "$0")/_venv.sh" "[test]"
.venv/bin/python -m pytest "$@"
