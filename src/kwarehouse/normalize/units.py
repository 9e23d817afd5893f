"""Export units to base units: "Kbyte" -> byte x1000, "Gbyte/s" -> byte/s x1e9, "us" -> ns x1000.

ncu prefixes are decimal (a Kbyte is 1,000 bytes: launch__shared_mem_config_size 32.768 Kbyte is
32,768 bytes in a --print-units base export of the same report). A unit is a numerator with optional
"/denominator" parts; each part is converted on its own and unknown parts are kept as they are.
The goal is the numbers ncu itself prints with --print-units base, so both exports of one report agree,
with one exception: a prefix in a denominator divides (0.956 "%/Kbyte" is 0.000956 "%/byte": a thousand
times fewer percent per byte than per kilobyte). ncu's --print-units base multiplies there instead
(1.591 "%/Kbyte" becomes 1,591 "%/byte" in the corpus's llama.raw.baseunits.csv, a millionfold off,
and so does the report API a .ncu-rep is read through); such a page prints only the base unit, so the
readers give the metrics ingest/ncu_base_unit_errata.csv names back in the unit ncu's default page
prints, and the conversion here is then right for every page. Time in a
denominator is a rate and stays per second.
"""

from __future__ import annotations

import csv
import functools
from importlib import resources

# Time in a denominator is a rate: keep it per second (byte/s), not per nanosecond.
_PER_SECOND = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
               "second": 1.0, "s": 1.0}


@functools.cache
def _atoms() -> dict[str, tuple[str, float]]:
    text = resources.files("kwarehouse.normalize").joinpath("units.csv").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    return {row["unit"]: (row["base_unit"], float(row["factor"])) for row in csv.DictReader(lines)}


@functools.cache
def is_known(unit: str | None) -> bool:
    """Whether kwh can convert a unit: each of its parts is in units.csv (or time in a rate's
    denominator). No unit (a count, or text) is known; a value in an unknown one cannot be compared
    with anything, and is stored as NULL with a warning.

    >>> is_known("Gbyte/s"), is_known("%/Kbyte"), is_known(""), is_known("parsec"), is_known("byte/parsec")
    (True, True, True, False, False)
    """
    if not unit:
        return True
    numerator, *denominators = unit.split("/")
    return numerator in _atoms() and all(d in _atoms() or d in _PER_SECOND for d in denominators)


@functools.cache
def to_base(unit: str | None) -> tuple[str, float]:
    """(base unit, factor) so that value_in_base = value * factor.

    >>> to_base("Gbyte/s")
    ('byte/s', 1000000000.0)
    >>> to_base("%/Kbyte")
    ('%/byte', 0.001)
    >>> to_base("Kbyte/Mbyte")
    ('byte/byte', 0.001)
    >>> to_base("inst/cycle")
    ('inst/cycle', 1.0)
    """
    if not unit:
        return "", 1.0
    numerator, *denominators = unit.split("/")
    base, factor = _atoms().get(numerator, (numerator, 1.0))
    parts = [base]
    for denominator in denominators:
        if denominator in _PER_SECOND:
            parts.append("s")
            factor /= _PER_SECOND[denominator]
        else:
            den_base, den_factor = _atoms().get(denominator, (denominator, 1.0))
            parts.append(den_base)
            factor /= den_factor   # per Kbyte is per 1,000 bytes (not as ncu's base-units page: see above)
    return "/".join(parts), factor
