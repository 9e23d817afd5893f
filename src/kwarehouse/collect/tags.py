"""--tag KEY=VALUE, the option `kwh ingest` and `kwh profile` share. A module of its own (click only),
so that kwh ingest does not import the profiler's command and plans to parse it."""

from __future__ import annotations

import click


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    """--tag key=value options as a dict."""
    tags = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not key=value", param_hint="--tag")
        tags[key.strip()] = val
    return tags
