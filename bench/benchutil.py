# SPDX-License-Identifier: MIT
"""bench/benchutil.py - what the run_*.sh summaries share (imported by the
Python they run; bench/benchutil.sh puts bench/ on the path).

A raw.txt holds comment lines ("# ...") and result lines: a bench name,
then key=value words ("poolbench op=read size=4096 depth=1 ops_s=..").
load() groups the result lines of one or more raw.txt files under a key
the caller derives from each line, so repetitions of a point (and several
runs summarised together) fall together; median() and values() then read
one field across them.
"""
import fileinput
import statistics
from collections import defaultdict


def load(paths, key):
    """Reads paths. key(bench, kv) names a line's point. Returns
    (rows, comments): rows maps each key to the kv dicts of its lines,
    comments is the comment lines in order."""
    rows = defaultdict(list)
    comments = []
    for line in fileinput.input(paths):
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            comments.append(line)
            continue
        words = line.split()
        kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        rows[key(words[0], kv)].append(kv)
    return rows, comments


def values(rows, k, field):
    """field of every line of point k that has it, as floats."""
    return [float(r[field]) for r in rows.get(k, []) if field in r]


def median(rows, k, field):
    """The median of field over point k's lines; None when none has it."""
    v = values(rows, k, field)
    return statistics.median(v) if v else None


def fmt(x, nd=0):
    """x with thousands separators and nd decimals; "n/a" for None."""
    return "n/a" if x is None else f"{x:,.{nd}f}"
