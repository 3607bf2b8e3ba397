#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_kvget_ab.sh - A/B of the KV tier's shared-prefix get: two
# builds' kvbench (tier tidepool, workload shared, 60 prompts, 1 layer)
# against a fresh standalone memd of the same build each (2560 MiB
# donated, 64 MiB slabs, kv_share 100), alternating A and B for seeds
# 1..REPS, so both see the same load. One line per run (get_MBps as
# kvbench defines it), then the medians. Builds nothing.
#
# usage: bench/run_kvget_ab.sh BUILD_A BUILD_B [REPS] [memd args...]
#        (e.g. --set shm_dir=/mnt/hugeshm); KVENV_A / KVENV_B: extra
#        environment for that side's kvbench ("LIBPOOL_SHM=off").
# Everything listens on 127.0.0.1; memd is killed after each run.
set -euo pipefail

A=${1:?usage: run_kvget_ab.sh BUILD_A BUILD_B [REPS] [memd args]}
B=${2:?usage: run_kvget_ab.sh BUILD_A BUILD_B [REPS] [memd args]}
REPS=${3:-3}
shift $(($# < 3 ? $# : 3))
TMP=$(mktemp -d /tmp/kvget-ab.XXXXXX)
MEMD_PID=
cleanup() {
	[ -z "$MEMD_PID" ] || kill "$MEMD_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

# one BUILD LABEL SEED ENV: one run, one result line
one() {
	local b=$1 label=$2 seed=$3 env=$4 addr out
	shift 4
	rm -f "$TMP/ready"
	"$b/memd/memd" --listen 127.0.0.1:0 --donate 2560M --slab-size 64M \
		--log-level warning --ready-file "$TMP/ready" \
		--set kv_share=100 "$@" >>"$TMP/memd.log" 2>&1 &
	MEMD_PID=$!
	for _ in $(seq 600); do
		[ -s "$TMP/ready" ] && break
		sleep 0.1
	done
	addr=$(head -n1 "$TMP/ready")
	out=$(env $env "$b/bench/kvbench" --tier tidepool --addr "$addr" \
		--workload shared --layers 1 --prompts 60 --hbm-prefixes 5 \
		--tps 10000 --seed "$seed")
	kill "$MEMD_PID"
	wait "$MEMD_PID" 2>/dev/null || true
	MEMD_PID=
	echo "KVGET side=$label seed=$seed load=$(cut -d' ' -f1 /proc/loadavg)" \
		"$(echo "$out" | grep -o 'get_MBps=[0-9.]*\|put_MBps=[0-9.]*\|bad=[0-9]*' |
			tr '\n' ' ')"
}

echo "# run_kvget_ab $(date -u +%FT%TZ) A=$A B=$B reps=$REPS memd_args=$* loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
for s in $(seq "$REPS"); do
	one "$A" A "$s" "${KVENV_A:-}" "$@" | tee -a "$TMP/raw"
	one "$B" B "$s" "${KVENV_B:-}" "$@" | tee -a "$TMP/raw"
done
echo "# loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
python3 - "$TMP/raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(w.split("=", 1) for w in line.split()[1:])
    rows.setdefault(kv["side"], []).append(float(kv["get_MBps"]))
a, b = statistics.median(rows["A"]), statistics.median(rows["B"])
print(f"median get_MBps A={a:.0f} B={b:.0f} B/A={b / a:.2f}")
PY
