#!/usr/bin/env bash
# Quick start 2: install with the test extra and run the test suite.
# Some tests need system programs: the PostgreSQL catalog tests a server's binaries, the report test a
# Chromium, the Spark parity tests Java 17. As root on Debian/Ubuntu this installs the distribution's packages when they are missing
# (elsewhere those tests are skipped).
missing=()
command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} for the catalog, report and Spark tests (apt-get)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) \
        || echo "could not install ${missing[*]}; their tests will be skipped" >&2
fi
source "$(dirname "$0")/_venv.sh" "[test]"
.venv/bin/python -m pytest "$@"
