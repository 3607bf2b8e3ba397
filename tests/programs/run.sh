#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tests/programs/run.sh - a real, unmodified program under
# libpool-preload.so against a real memd (issue 13, whole-program paging):
#
#   run.sh BUILD_DIR PROGRAM [ci|full]
#
# PROGRAM is sqlite3, python3, sort or threads (tp_programs threads). The
# program runs once plain and once under the shim with a process budget
# (LIBPOOL_LOCAL_BYTES) far below its plain peak RSS; the test passes when
#   - both exit 0 and their stdout is byte for byte the same,
#   - the shim run's peak RSS (/usr/bin/time %M) <= budget + OVERHEAD +
#     pooled_bytes / 32 (the shim's overhead: a fixed part, the session
#     and libfabric, and a part that grows with the heap; docs/bench/
#     paging.md, "Whole programs"), and
#   - the pool holds the rest: the shim's stats line (LIBPOOL_PRELOAD_STATS)
#     has pooled_bytes >= plain peak RSS - shim peak RSS.
# Sizes: "ci" (default) is scaled to run in about a minute on a 2-core VM;
# "full" is issue 13's (tests/programs/long.sh runs all of them).
#   sqlite3  rows of ~220 bytes in :memory:, a secondary index, a full
#            sort by window function; ci 400K rows (plain peak ~200 MiB)
#            at 32M, full 3.6M rows (plain peak 1.7 GiB) at 256M
#   python3  a dict and a list of N small objects each, run as a user
#            would (no PYTHONMALLOC: the shim sets PYTHONMALLOC=malloc for
#            CPython itself, else pymalloc's mmap'ed arenas would stay
#            outside the budget); ci 1M+1M, full 10M+10M; budget a quarter
#            of the plain peak RSS. Also checks that the shim sets the
#            variable, keeps a user's own, and leaves it unset with
#            LIBPOOL_PYTHON_MALLOC=0
#   sort     GNU sort -S 2x the input of a deterministic file (keys in
#            descending runs; see below); ci 64 MiB, full 1 GiB;
#            budget a quarter of the plain peak RSS
#   threads  8 threads, ci 128 MiB live at most, full 1 GiB; budget a
#            quarter of the plain peak RSS
# TP_PROGRAMS_WRONG=1 changes one byte of the plain output before the
# comparison: the test must then fail (the check that it can).
# Exits 0 (pass), 1 (fail), 77 (skipped: the program is not installed,
# /usr/bin/time is missing, or memd cannot start).
set -u

BUILD=${1:?usage: run.sh BUILD_DIR PROGRAM [ci|full]}
PROG=${2:?usage: run.sh BUILD_DIR PROGRAM [ci|full]}
SCALE=${3:-ci}
BUILD=$(cd "$BUILD" && pwd)
MEMD=${TP_MEMD:-$BUILD/memd/memd}
SHIM=${TP_PRELOAD:-$BUILD/libpool/libpool-preload.so}
TPP=$BUILD/tests/tp_programs
# Peak RSS above the budget that the shim may add (MiB), besides 1/32 of
# the pooled bytes: measured 93-108 MiB with any program once it connects
# (95 MiB for a 1 MiB program), and 147 MiB for sqlite3 with 1.94 GiB
# pooled (docs/bench/paging.md, "Whole programs").
OVERHEAD_MB=${TP_PROGRAMS_OVERHEAD_MB:-128}

fail() {
	echo "FAIL $PROG ($SCALE): $*" >&2
	exit 1
}
skip() {
	echo "SKIP $PROG ($SCALE): $*"
	exit 77
}

[ -x /usr/bin/time ] || skip "/usr/bin/time not installed (peak RSS)"
[ -x "$MEMD" ] || skip "no memd at $MEMD"
[ -r "$SHIM" ] || skip "no shim at $SHIM"
case $PROG in
sqlite3) command -v sqlite3 >/dev/null || skip "sqlite3 not installed" ;;
python3) [ -x /usr/bin/python3 ] || skip "/usr/bin/python3 not installed" ;;
sort) command -v sort >/dev/null || skip "sort not installed" ;;
threads) [ -x "$TPP" ] || skip "no $TPP (build tests)" ;;
*) fail "unknown program (sqlite3, python3, sort, threads)" ;;
esac

TMP=$(mktemp -d /tmp/tp-programs.XXXXXX)
MEMD_PID=
cleanup() {
	[ -z "$MEMD_PID" ] || kill "$MEMD_PID" 2>/dev/null
	[ -z "$MEMD_PID" ] || wait "$MEMD_PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the workload: CMD (an array), its stdin, the budget ---------------
BUDGET_MB= # empty: a quarter of the plain run's peak RSS
IN=/dev/null
DONATE=1G
case $PROG in
sqlite3)
	rows=400000 BUDGET_MB=32
	[ "$SCALE" = full ] && rows=3600000 BUDGET_MB=256 DONATE=3G
	# Deterministic rows; an index on k; every row visited in k order
	# by a window function (a full sort); an order-sensitive checksum.
	cat >"$TMP/in.sql" <<EOF
PRAGMA temp_store = memory;
PRAGMA cache_size = -4000000;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, v TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < $rows)
INSERT INTO t SELECT x, (x * 2654435761) % 1000003,
	printf('%d-%0200d', x, (x * 7919) % 1000000007) FROM c;
CREATE INDEX t_k ON t(k);
SELECT count(*), sum(k), sum(length(v)) FROM t;
SELECT id, k, substr(v, 1, 20) FROM t WHERE k BETWEEN 500000 AND 500010
	ORDER BY k, id;
SELECT sum((rn % 1000003) * (id % 1000003)) FROM
	(SELECT id, row_number() OVER (ORDER BY v DESC) AS rn FROM t);
SELECT id FROM t ORDER BY substr(v, 10, 30), id LIMIT 5 OFFSET $((rows / 2));
EOF
	CMD=(sqlite3 :memory:)
	IN=$TMP/in.sql
	;;
python3)
	n=1000000
	[ "$SCALE" = full ] && n=10000000 DONATE=5G
	cat >"$TMP/prog.py" <<EOF
import zlib
n = $n
d = {i * 7: (i, i + 1) for i in range(n)}
l = [str(i * 3) for i in range(n)]
h = 0
for k, v in d.items():
    h = zlib.crc32(b"%d:%d:%d" % (k, v[0], v[1]), h)
h2 = zlib.crc32("".join(l[::97]).encode())
print(len(d), len(l), "%08x" % h, "%08x" % h2, sum(d[7 * j][1] for j in range(0, n, 3)))
EOF
	CMD=(env -u PYTHONMALLOC PYTHONHASHSEED=0 /usr/bin/python3 "$TMP/prog.py")
	;;
sort)
	mib=64
	[ "$SCALE" = full ] && mib=1024 DONATE=4G
	[ -x "$TPP" ] || skip "no $TPP (the input generator)"
	# Keys in descending runs of 64 lines, shuffled inside each run
	# (tp_programs runs): merging reads the text as a few streams. With
	# keys in random order every comparison of the merge sort is a
	# random read of the text, a remote fault once the text is larger
	# than the budget: 64 MiB at a 32 MiB budget ran > 110 s against
	# 3 s plain on this VM (docs/bench/paging.md, "Whole programs").
	"$TPP" runs "$mib" >"$TMP/in.txt" || fail "generating the input"
	# -S: sort's buffer sized to the input, as a user would. Without
	# it sort asks for a share of physical memory; the heap takes that
	# address space from the pool's quota (what a program allocates,
	# not what it touches: libpool-preload(8)) and, with a small pool,
	# the next large allocation goes to glibc, outside the budget.
	CMD=(env LC_ALL=C sort -S $((mib * 2))M "$TMP/in.txt")
	;;
threads)
	mib=128
	[ "$SCALE" = full ] && mib=1024 DONATE=3G
	CMD=("$TPP" threads "$mib")
	;;
esac

# ---- memd --------------------------------------------------------------
"$MEMD" --listen 127.0.0.1:0 --donate "$DONATE" --log-level warning \
	--ready-file "$TMP/ready" >"$TMP/memd.log" 2>&1 &
MEMD_PID=$!
# memd locks its donation in memory at start: seconds per GiB on a busy VM
for _ in $(seq 1200); do
	[ -s "$TMP/ready" ] && break
	kill -0 "$MEMD_PID" 2>/dev/null || skip "memd exited: $(cat "$TMP/memd.log")"
	sleep 0.1
done
[ -s "$TMP/ready" ] || skip "memd not ready after 120 s"
ADDR=$(head -n1 "$TMP/ready")

# ---- plain, then under the shim ----------------------------------------
t0=$(date +%s)
/usr/bin/time -f %M -o "$TMP/plain.rss" "${CMD[@]}" <"$IN" \
	>"$TMP/plain.out" 2>"$TMP/plain.err" ||
	fail "plain run exited $?: $(tail -3 "$TMP/plain.err")"
t1=$(date +%s)
plain_kb=$(tail -n1 "$TMP/plain.rss")
[ -n "$BUDGET_MB" ] || BUDGET_MB=$((plain_kb / 1024 / 4))
[ "$BUDGET_MB" -ge 16 ] || BUDGET_MB=16
/usr/bin/time -f %M -o "$TMP/shim.rss" env LD_PRELOAD="$SHIM" \
	LIBPOOL_ADDR="$ADDR" LIBPOOL_LOCAL_BYTES="${BUDGET_MB}M" \
	LIBPOOL_PRELOAD_STATS="$TMP/stats" ${TP_PROGRAMS_ENV:-} \
	"${CMD[@]}" <"$IN" >"$TMP/shim.out" 2>"$TMP/shim.err" ||
	fail "shim run exited $?: $(tail -3 "$TMP/shim.err")"
t2=$(date +%s)
shim_kb=$(tail -n1 "$TMP/shim.rss")
stats=$(grep -h '^libpool-preload: stats' "$TMP/stats" 2>/dev/null | tail -n1)
statval() { # key
	echo "$stats" | tr ' ' '\n' | sed -n "s/^$1=//p"
}
pooled=$(statval pooled_bytes)
echo "$PROG ($SCALE): plain $((t1 - t0)) s, peak $((plain_kb / 1024)) MiB;" \
	"shim $((t2 - t1)) s, budget ${BUDGET_MB} MiB, peak" \
	"$((shim_kb / 1024)) MiB, overhead $((shim_kb / 1024 - BUDGET_MB)) MiB"
echo "$stats"

if [ "${TP_PROGRAMS_WRONG:-0}" = 1 ]; then
	printf 'X' | dd of="$TMP/plain.out" bs=1 seek=0 conv=notrunc 2>/dev/null
fi
[ -s "$TMP/plain.out" ] || fail "plain run printed nothing"
cmp -s "$TMP/plain.out" "$TMP/shim.out" ||
	fail "outputs differ: $(cmp "$TMP/plain.out" "$TMP/shim.out" 2>&1 | head -1)"
[ -n "$stats" ] || fail "no stats line from the shim (not loaded?)"
[ -n "$pooled" ] || fail "no pooled_bytes in the stats line"
limit_mb=$((BUDGET_MB + OVERHEAD_MB + pooled / 32 / 1048576))
[ $((shim_kb / 1024)) -le $limit_mb ] ||
	fail "peak RSS $((shim_kb / 1024)) MiB > budget ${BUDGET_MB} MiB + ${OVERHEAD_MB} MiB + pooled/32 = $limit_mb MiB"
[ -n "$pooled" ] && [ "$pooled" -ge $(((plain_kb - shim_kb) * 1024)) ] ||
	fail "pooled_bytes=${pooled:-none} < plain peak - shim peak ($(((plain_kb - shim_kb) / 1024)) MiB)"
if [ "$PROG" = python3 ]; then
	pymalloc() { # env assignments...: PYTHONMALLOC as CPython under the shim sees it
		env -u PYTHONMALLOC LD_PRELOAD="$SHIM" LIBPOOL_ADDR="$ADDR" "$@" \
			/usr/bin/python3 -c 'import os; print(os.environ.get("PYTHONMALLOC"))'
	}
	got=$(pymalloc) || fail "python3 -c under the shim exited $?"
	[ "$got" = malloc ] || fail "the shim left PYTHONMALLOC=$got (want malloc)"
	got=$(pymalloc PYTHONMALLOC=pymalloc) || fail "python3 -c exited $?"
	[ "$got" = pymalloc ] || fail "the shim replaced a user's PYTHONMALLOC=pymalloc by $got"
	got=$(pymalloc LIBPOOL_PYTHON_MALLOC=0) || fail "python3 -c exited $?"
	[ "$got" = None ] || fail "LIBPOOL_PYTHON_MALLOC=0 still set PYTHONMALLOC=$got"
	got=$(pymalloc LIBPOOL_ALLOCATOR=regions) || fail "python3 -c exited $?"
	[ "$got" = None ] || fail "LIBPOOL_ALLOCATOR=regions (small objects stay in libc) set PYTHONMALLOC=$got"
fi
echo "PASS $PROG ($SCALE)"
