#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench/paging_programs.sh - whole programs under libpool-preload.so against
# the same programs all-local (no shim), at 100/75/50/25 % local, with the
# pooled jemalloc heap (the default engine) and the per-allocation engine
# (LIBPOOL_ALLOCATOR=regions) side by side in the same run; then the
# service time of one remote 4 KiB fault (bench/fault_latency) against a
# raw 4 KiB fi_read (bench/rawfab) and a 4 KiB pool_read. Results and the
# command used: docs/bench/paging.md, "Whole programs".
#
#   bench/paging_programs.sh [BUILD_DIR] [OUT_DIR]
#
# Environment: RUNS (default 3: medians), WORKS (default
# "sqlite3 python3 sort scan hash"), PCTS (default "100 75 50 25"),
# ENGINES (default "jemalloc regions"; an entry ENGINE:VAR=V,VAR2=V2 runs
# that engine with those variables too, e.g. jemalloc:LIBPOOL_PAGING_BEHIND=0
# for the policy switches of docs/paging.md), SCALE (default 1: the sizes below;
# 4 runs them four times bigger), FAULT_SAMPLES (default 4000), DONATE
# (memd's --donate, default (2 * SCALE + 1)G: an exited run's leases live
# until their TTL, ~10 s, so fast runs back to back need more; a heap run
# that found the pool full fell back to libc, which shows as pooled_bytes
# under half the plain peak RSS: an error line, not a figure).
#
# Workloads (SCALE=1):
#   sqlite3  200K rows of ~220 B in :memory:, an index, a sorted query
#   python3  dict of 400K int->tuple built, then 400K lookups
#            (PYTHONMALLOC=malloc in every run: pymalloc mmaps its arenas)
#   sort     GNU sort (LC_ALL=C, -S 96M) of 48 MiB of lines, keys in
#            descending runs of 64 (tp_programs runs: see run.sh)
#   scan     128 MiB array filled, 4 sequential passes (tp_programs scan)
#   hash     64 MiB open-addressing table, random inserts and lookups
#            (uniform keys, half misses: the worst case for any pager)
#   hashz    the same table, lookups of keys of Zipf(0.99) popularity
#            (YCSB's skew; not in the default WORKS)
#   hot      64 MiB array, random read-modify-writes, 80 % to its first
#            30 % (issue 28's hot set; not in the default WORKS)
#   hotpage  the same hot set with work per access: 16 random page
#            reads per 4 KiB page of a 64 MiB array, 80 % to its first
#            30 %, each summing the whole page (not in the default WORKS)
# The budget (LIBPOOL_LOCAL_BYTES) is that percentage of the plain run's
# median peak RSS (/usr/bin/time %M); with regions it is per allocation
# (the old engine has no process budget). Each run's output is compared
# with the plain one: a difference is an error line, not a figure.
# One line per point: "programs work= engine= local= s= slowdown=
# peak_mb= budget_mb=", medians of RUNS; "fault_latency ..." and
# "rawfab ..." lines for the fault latency.
set -u

BENCH_NAME=paging_programs
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build/release}" && pwd)
OUT_DIR=${2:-$BUILD/paging_programs}
# shellcheck source=bench/benchutil.sh
. "$ROOT/bench/benchutil.sh"
RUNS=${RUNS:-3}
WORKS=${WORKS:-sqlite3 python3 sort scan hash}
PCTS=${PCTS:-100 75 50 25}
ENGINES=${ENGINES:-jemalloc regions}
SCALE=${SCALE:-1}
FAULT_SAMPLES=${FAULT_SAMPLES:-4000}
MEMD=$BUILD/memd/memd
SHIM=$BUILD/libpool/libpool-preload.so
TPP=$BUILD/tests/tp_programs
bench_need "$MEMD" "$SHIM" "$TPP" "$BUILD/bench/fault_latency" \
	"$BUILD/bench/rawfab"
[ -x /usr/bin/time ] || die "/usr/bin/time is needed (peak RSS)"
bench_out paging_programs
START_TIME=$(date +%s)
bench_start_memd "$OUT_DIR/memd.log" --donate "${DONATE:-$((2 * SCALE + 1))G}"
log "memd at $MEMD_ADDR; raw lines in $RAW"
echo "# paging_programs runs=$RUNS scale=$SCALE nproc=$(nproc) loadavg=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,) commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)" >>"$RAW"

setup() { # work: sets CMD and IN
	IN=/dev/null
	case $1 in
	sqlite3)
		local rows=$((200000 * SCALE))
		cat >"$TMP/in.sql" <<EOF
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $rows)
INSERT INTO t SELECT x, (x * 2654435761) % 1000003,
	printf('%d-%0200d', x, (x * 7919) % 1000000007) FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(length(v)) FROM t WHERE k % 7 = 3;
SELECT id FROM t ORDER BY v DESC LIMIT 3 OFFSET $((rows / 2));
SELECT sum(id) FROM t WHERE k BETWEEN 1000 AND 200000;
EOF
		CMD=(sqlite3 :memory:)
		IN=$TMP/in.sql
		;;
	python3)
		cat >"$TMP/prog.py" <<EOF
n = $((400000 * SCALE))
d = {i * 7: (i, i + 1) for i in range(n)}
s = 0
x = 1
for j in range(n):
    x = (x * 1103515245 + 12345) % 2147483648
    s += d[7 * (x % n)][1]
print(len(d), s)
EOF
		CMD=(env PYTHONMALLOC=malloc PYTHONHASHSEED=0 /usr/bin/python3 "$TMP/prog.py")
		;;
	sort)
		[ -s "$TMP/in.txt" ] || "$TPP" runs $((48 * SCALE)) >"$TMP/in.txt"
		# -S: see tests/programs/run.sh
		CMD=(env LC_ALL=C sort -S $((96 * SCALE))M "$TMP/in.txt")
		;;
	scan) CMD=("$TPP" scan $((128 * SCALE))) ;;
	hash) CMD=("$TPP" hash $((64 * SCALE))) ;;
	hashz) CMD=("$TPP" hash $((64 * SCALE)) zipf 0.99) ;;
	hot) CMD=("$TPP" hot $((64 * SCALE))) ;;
	hotpage) CMD=("$TPP" hotpage $((64 * SCALE))) ;;
	*) die "unknown workload $1" ;;
	esac
}

# one_run OUT ENV...: runs CMD with ENV, stdout to OUT; prints "SECONDS KB"
one_run() {
	local out=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	/usr/bin/time -f %M -o "$TMP/rss" env "$@" "${CMD[@]}" <"$IN" \
		>"$out" 2>"$TMP/err" || {
		log "failed ($*): $(tail -2 "$TMP/err")"
		echo "-1 0"
		return
	}
	t1=$(date +%s.%N)
	echo "$(echo "$t1 - $t0" | bc) $(tail -n1 "$TMP/rss")"
}

median() { # numbers... -> the median (lower middle of an even count)
	printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'
}

for w in $WORKS; do
	setup "$w"
	ts=() ks=()
	for _ in $(seq "$RUNS"); do
		read -r t k < <(one_run "$TMP/plain.out")
		ts+=("$t") ks+=("$k")
	done
	base=$(median "${ts[@]}")
	peak=$(median "${ks[@]}")
	echo "programs work=$w engine=none local=all-local s=$base slowdown=1.00 peak_mb=$((peak / 1024))" | tee -a "$RAW"
	for pct in $PCTS; do
		budget=$((peak * pct / 100 / 1024))
		[ "$budget" -ge 1 ] || budget=1
		for eng in $ENGINES; do
			ts=() ks=() bad=0 extra=()
			[ "${eng#*:}" = "$eng" ] || IFS=, read -r -a extra <<<"${eng#*:}"
			nopool=0
			for _ in $(seq "$RUNS"); do
				: >"$TMP/stats"
				read -r t k < <(one_run "$TMP/shim.out" \
					LD_PRELOAD="$SHIM" LIBPOOL_ADDR="$MEMD_ADDR" \
					LIBPOOL_ALLOCATOR="${eng%%:*}" \
					LIBPOOL_PRELOAD_STATS="$TMP/stats" \
					LIBPOOL_LOCAL_BYTES="${budget}M" "${extra[@]}")
				cmp -s "$TMP/plain.out" "$TMP/shim.out" || bad=1
				# the heap's regions never shrink and back all
				# it allocated: under half the plain peak, libc
				# served the rest (memd full)
				pooled=$(grep -o ' pooled_bytes=[0-9]*' "$TMP/stats" | cut -d= -f2)
				[ "${eng%%:*}" != jemalloc ] ||
					[ "${pooled:-0}" -ge $((peak * 512)) ] ||
					nopool=$((nopool + 1))
				ts+=("$t") ks+=("$k")
			done
			s=$(median "${ts[@]}")
			[ $bad = 0 ] || echo "# ERROR work=$w engine=$eng local=$pct output differs from the plain run" | tee -a "$RAW"
			[ $nopool = 0 ] || echo "# ERROR work=$w engine=$eng local=$pct $nopool runs fell back to libc (pool full? DONATE)" | tee -a "$RAW"
			echo "programs work=$w engine=$eng local=$pct s=$s slowdown=$(echo "scale=2; $s / $base" | bc) peak_mb=$(($(median "${ks[@]}") / 1024)) budget_mb=$budget runs_s=$(
				IFS=,
				echo "${ts[*]}"
			)" | tee -a "$RAW"
		done
	done
done

# ---- fault latency: one remote 4 KiB fault, pool_read, raw fi_read ----
"$BUILD/bench/fault_latency" "$MEMD_ADDR" "$FAULT_SAMPLES" 2>/dev/null | tee -a "$RAW"
"$BUILD/bench/rawfab" --sizes 4K --depths 1 --rw read 2>/dev/null |
	grep '^rawfab ' | tee -a "$RAW"

summarize() {
	grep -h '^programs\|^fault_latency\|^rawfab\|^# ERROR' "$@"
}
bench_finish
