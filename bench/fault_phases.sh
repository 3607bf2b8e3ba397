#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench/fault_phases.sh - bench/fault_latency's phases line for several
# engine variants, interleaved round by round (so that a change of load
# hits them alike), with the median (and range) of every field per
# variant: docs/bench/paging.md, "Per-fault service time, cut".
#
#   bench/fault_phases.sh BUILD_DIR ADDR ROUNDS VARIANT...
#
# A VARIANT is a space-separated list of VAR=VALUE for env(1), e.g.
# "LIBPOOL_SHM=map LIBPOOL_PAGING_DIRECT=0". Every run has
# LIBPOOL_PAGING_WAKE_SPLIT=1 (the wake-up timed apart). Environment:
# SAMPLES (default 4000), GAP (gap_us, default 0). Output, one line per
# variant: f_p50 f_mean (the program's fault, us), read (its 4 KiB
# pool_read p50), fetch install room drop wake late service ratio (the
# phases line's, us per fault; ratio = service / read), each
# median[min-max] over the rounds.
set -eu
B=${1:?usage: $0 BUILD_DIR ADDR ROUNDS VARIANT...}
ADDR=${2:?ADDR}
ROUNDS=${3:?ROUNDS}
shift 3
[ $# -gt 0 ] || { echo "fault_phases: no variant" >&2; exit 2; }
FL=$B/bench/fault_latency
[ -x "$FL" ] || { echo "fault_phases: $FL missing (build it)" >&2; exit 1; }
O=$(mktemp -d /tmp/fault_phases.XXXXXX)
trap 'rm -rf "$O"' EXIT
for _ in $(seq "$ROUNDS"); do
	k=0
	for v in "$@"; do
		# shellcheck disable=SC2086 # a variant is words for env
		env $v LIBPOOL_PAGING_WAKE_SPLIT=1 "$FL" "$ADDR" \
			"${SAMPLES:-4000}" "${GAP:-0}" 2>/dev/null >>"$O/$k" ||
			echo "fault_phases: run failed ($v)" >&2
		k=$((k + 1))
	done
done
k=0
for v in "$@"; do
	/usr/bin/python3 - "$v" "$O/$k" <<'PY'
import re, statistics, sys
keys = ["f_p50", "f_mean", "read", "fetch", "install", "room", "drop",
        "wake", "late", "service", "ratio"]
rows, d = [], {}
for line in open(sys.argv[2]):
    f = dict(re.findall(r"(\w+)=([\d.]+)", line))
    if "op=fault " in line:
        d = {"f_p50": f["p50_us"], "f_mean": f["mean_us"]}
    elif "op=pool_read" in line:
        d["read"] = f["p50_us"]
    elif "op=phases" in line:
        for k in ["fetch", "install", "room", "drop", "wake", "late",
                  "service"]:
            d[k] = f[k + "_us"]
        d["ratio"] = f["serve_nowake_vs_pool_read"]
        rows.append({k: float(x) for k, x in d.items()})
if not rows:
    sys.exit("fault_phases: no result for " + sys.argv[1])
print("variant=%r rounds=%d" % (sys.argv[1], len(rows)),
      " ".join("%s=%.2f[%.2f-%.2f]" % (k,
               statistics.median(r[k] for r in rows),
               min(r[k] for r in rows), max(r[k] for r in rows))
               for k in keys))
PY
	k=$((k + 1))
done
