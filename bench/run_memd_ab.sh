#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_memd_ab.sh - memd variants side by side: the same poolbench
# reads against each, interleaved, with what memd spent serving them.
#
# Each VARIANT is NAME=MEMD_BINARY[:ARG ARG...] (ARGs go to that memd,
# e.g. --set busy_poll_us=0). Every repetition starts each variant's memd
# afresh (1G donated, 64M slabs, loopback) and runs poolbench reads of
# SIZES at DEPTHS against it; memd's CPU time (utime+stime from
# /proc/PID/stat) is read before and after each point, so every point also
# says how much memd CPU one operation and one GB cost. Prints medians over
# the repetitions per variant and point, and ratios against the first
# variant (the baseline of the run).
#
# usage: bench/run_memd_ab.sh [BUILD_DIR] VARIANT...
#        bench/run_memd_ab.sh --summarize RAW.txt...
# Knobs (environment): REPS=3 POINT_SECONDS=2 WARMUP=0.2 SIZES=4K,1M
#   DEPTHS=1,16 OUT_DIR=<BUILD>/memd-ab-results/<time>
# Example (the busy-polling before/after of docs/bench/poolbench.md):
#   cp build-bench/memd/memd /tmp/memd-main     # built from main
#   bench/run_memd_ab.sh build-bench main=/tmp/memd-main \
#       poll0=build-bench/memd/memd:"--set busy_poll_us=0" \
#       poll50=build-bench/memd/memd:"--set busy_poll_us=50"
set -euo pipefail

# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
bench_python

summarize() {
	bench_summarize_py "$@" <<'EOF'
import statistics, sys
from collections import defaultdict
from benchutil import fmt

rows = defaultdict(list)
order = []
for path in sys.argv[1:]:
    for line in open(path):
        w = line.split()
        if not w or w[0] != "ab":
            continue
        kv = dict(x.split("=", 1) for x in w[1:] if "=" in x)
        key = (kv["variant"], int(kv["size"]), int(kv["depth"]))
        if kv["variant"] not in order:
            order.append(kv["variant"])
        rows[key].append(kv)

def med(key, f):
    v = [float(r[f]) for r in rows.get(key, []) if f in r]
    return statistics.median(v) if v else None

points = sorted({(s, d) for (_, s, d) in rows})
print(f"{'variant':>10} {'size':>8} {'depth':>5} {'ops/s':>10} {'MB/s':>9} "
      f"{'p50_us':>8} {'p99_us':>8} {'memd_cpu_us/op':>14} "
      f"{'memd_cpu_s/GB':>13} {'n':>2}")
for s, d in points:
    for v in order:
        k = (v, s, d)
        if k not in rows:
            continue
        print(f"{v:>10} {s:>8} {d:>5} {fmt(med(k, 'ops_s')):>10} "
              f"{fmt(med(k, 'MBps')):>9} {fmt(med(k, 'p50_us'), 1):>8} "
              f"{fmt(med(k, 'p99_us'), 1):>8} {fmt(med(k, 'cpu_us_op'), 2):>14} "
              f"{fmt(med(k, 'cpu_s_gb'), 3):>13} {len(rows[k]):>2}")
print()
base = order[0] if order else None
for s, d in points:
    for v in order[1:]:
        b, n = med((base, s, d), "ops_s"), med((v, s, d), "ops_s")
        bp, np_ = med((base, s, d), "p50_us"), med((v, s, d), "p50_us")
        if b and n and bp and np_:
            print(f"ratio variant={v} vs={base} size={s} depth={d} "
                  f"ops={n / b:.2f} p50={np_ / bp:.2f}")
EOF
}
bench_cli 4 23 "$@"

BUILD=$ROOT/build-bench
if [ $# -gt 0 ] && [[ $1 != *=* ]]; then
	BUILD=$1
	shift
fi
[ $# -gt 0 ] || die "no VARIANT given (NAME=MEMD_BINARY[:ARGS]); see --help"
REPS=${REPS:-3}
POINT_SECONDS=${POINT_SECONDS:-2}
WARMUP=${WARMUP:-0.2}
SIZES=${SIZES:-4K,1M}
DEPTHS=${DEPTHS:-1,16}
OUT_DIR=${OUT_DIR:-$BUILD/memd-ab-results/$(date +%Y%m%d-%H%M%S)}
POOLBENCH=$BUILD/bench/poolbench
bench_need "$POOLBENCH"
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive count"

declare -a NAMES BINS ARGS
for v in "$@"; do
	[[ $v =~ ^([A-Za-z0-9_.-]+)=([^:]+)(:(.*))?$ ]] ||
		die "bad VARIANT '$v' (want NAME=MEMD_BINARY[:ARGS])"
	NAMES+=("${BASH_REMATCH[1]}")
	BINS+=("${BASH_REMATCH[2]}")
	ARGS+=("${BASH_REMATCH[4]}")
	bench_need "${BASH_REMATCH[2]}"
done

bench_out memd-ab
START_TIME=$(date +%s)
{
	echo "# run_memd_ab $(date -u +%FT%TZ) git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# host cpus=$(nproc) kernel=$(uname -r) loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
	echo "# reps=$REPS point_seconds=$POINT_SECONDS sizes=$SIZES depths=$DEPTHS"
	for i in "${!NAMES[@]}"; do
		echo "# variant ${NAMES[$i]}=${BINS[$i]} ${ARGS[$i]}"
	done
} >>"$RAW"

HZ=$(getconf CLK_TCK)
for rep in $(seq "$REPS"); do
	for i in "${!NAMES[@]}"; do
		MEMD=${BINS[$i]}
		rm -f "$TMP/memd.ready"
		# shellcheck disable=SC2086 # ARGS are words on purpose
		bench_start_memd "$OUT_DIR/memd-${NAMES[$i]}.log" --donate 1G \
			--slab-size 64M ${ARGS[$i]}
		for s in ${SIZES//,/ }; do
			for d in ${DEPTHS//,/ }; do
				c0=$(bench_cpu_ticks "$MEMD_PID")
				line=$(run_cmd "$POOLBENCH" -a "$MEMD_ADDR" -s "$s" \
					-d "$d" --rw read -T "$POINT_SECONDS" \
					-w "$WARMUP" | grep '^poolbench ' | head -1) ||
					die "poolbench failed against ${NAMES[$i]}"
				c1=$(bench_cpu_ticks "$MEMD_PID")
				"$PY" - "$line" "$((c1 - c0))" "$HZ" \
					"${NAMES[$i]}" "$rep" >>"$RAW" <<'EOF'
import sys
line, ticks, hz, name, rep = sys.argv[1:]
kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
ops, size = float(kv["ops"]), int(kv["size"])
cpu_s = int(ticks) / int(hz)
print(f"ab variant={name} size={size} depth={kv['depth']} "
      f"ops_s={kv['ops_s']} MBps={kv['MBps']} p50_us={kv['p50_us']} "
      f"p99_us={kv['p99_us']} cpu_us_op={cpu_s * 1e6 / ops:.2f} "
      f"cpu_s_gb={cpu_s / (ops * size / 1e9):.3f} rep={rep}")
EOF
			done
		done
		kill "$MEMD_PID"
		wait "$MEMD_PID" 2>/dev/null || true
		log "rep $rep/${REPS}: ${NAMES[$i]} done"
	done
done
bench_finish
