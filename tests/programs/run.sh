#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tests/programs/run.sh - a real, unmodified program under
# libpool-preload.so against a real memd (issue 13, whole-program paging):
#
#   run.sh BUILD_DIR PROGRAM [ci|full] [quarter|half|ample]
#
# PROGRAM is sqlite3, python3, sort, threads (tp_programs threads), or one
# of the compatibility suite (issue 28): numpy, torch, perl, gcc, git,
# node, redis, xz, shell, deepbind (below). The program runs once plain
# and once under the shim with a process budget (LIBPOOL_LOCAL_BYTES);
# the test passes when
#   - both exit 0 and their stdout is byte for byte the same,
#   - the shim run's peak RSS (/usr/bin/time %M: the largest process of
#     the run) <= budget + OVERHEAD + pooled_bytes / 32 + rss_file_bytes
#     (the shim's overhead: a fixed part, the session and libfabric, and a
#     part that grows with the heap; docs/bench/paging.md, "Whole
#     programs"; and the program's file-backed pages, its code and mapped
#     files, which no budget covers: the stats line's rss_file_bytes at
#     exit; with several processes the largest of each), and
#   - the pool holds the rest: the shim's stats line (LIBPOOL_PRELOAD_STATS)
#     has pooled_bytes >= plain peak RSS - shim peak RSS.
# node keeps its JavaScript heap in memory V8 maps itself (mmap), which
# the shim does not see: for node only the output and the exit status are
# checked.
# The budget: quarter (default; sqlite3's is fixed, see below) is a
# quarter of the plain run's peak RSS, half half of it, ample twice it
# plus 64 MiB (nothing needs to be evicted). One line "result PROGRAM
# SCALE BUDGET pass|fail plain_s= shim_s= plain_mib= budget_mib= peak_mib="
# ends stdout (bench/programs_suite.sh collects them).
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
#   numpy    python3: numpy.ones(10**6).sum() (issue 28's SIGBUS), a
#            matrix product, a sort of ci 2M, full 16M integers
#   torch    python3: import torch (issue 28's abort), tensor ops, a small
#            nn forward and backward with SGD, a DataLoader with 2 worker
#            processes (fork: the heap evicted before the fork is fetched
#            for them; at a quarter of the peak they died of SIGSEGV
#            before, issue 28; CI runs it at a quarter and a half)
#   perl     a hash of ci 200K, full 2M entries, sorted and summed
#   gcc      gcc -O2 -S of libpool/paging.c (cc1 is a child) to stdout
#   git      git log -p of this repository, the last 300 commits (full:
#            all of them)
#   node     a Map of ci 200K, full 2M objects (if node is installed)
#   redis    redis-server on a unix socket under redis-benchmark, then a
#            deterministic population; DBSIZE, DEBUG DIGEST and a few
#            values printed (tests/programs/redis.sh); ci 20K, full 400K
#   xz       xz -6 of ci 4 MiB, full 64 MiB of text (tp_programs lines)
#   shell    bash: fork, subshells, pipes of external commands; python's
#            os.posix_spawn, subprocess and os.fork; ci 100, full 1000
#   deepbind python3 ctypes opens tests/programs/tp_deepbind.c
#            (libtp_deepbind.so) with RTLD_DEEPBIND; pointers cross both
#            ways
# TP_PROGRAMS_WRONG=1 changes one byte of the plain output before the
# comparison: the test must then fail (the check that it can).
# Exits 0 (pass), 1 (fail), 77 (skipped: the program is not installed,
# /usr/bin/time is missing, or memd cannot start).
set -u

BUILD=${1:?usage: run.sh BUILD_DIR PROGRAM [ci|full] [quarter|half|ample]}
PROG=${2:?usage: run.sh BUILD_DIR PROGRAM [ci|full] [quarter|half|ample]}
SCALE=${3:-ci}
POLICY=${4:-quarter}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$BUILD" && pwd)
MEMD=${TP_MEMD:-$BUILD/memd/memd}
SHIM=${TP_PRELOAD:-$BUILD/libpool/libpool-preload.so}
TPP=$BUILD/tests/tp_programs
# Peak RSS above the budget that the shim may add (MiB), besides 1/32 of
# the pooled bytes: measured 93-108 MiB with any program once it connects
# (95 MiB for a 1 MiB program), and 147 MiB for sqlite3 with 1.94 GiB
# pooled (docs/bench/paging.md, "Whole programs").
OVERHEAD_MB=${TP_PROGRAMS_OVERHEAD_MB:-128}

PLAIN_S= SHIM_S= PLAIN_MIB= PEAK_MIB= BUDGET_MB=
fail() {
	echo "FAIL $PROG ($SCALE, $POLICY): $*" >&2
	echo "result $PROG $SCALE $POLICY fail plain_s=$PLAIN_S shim_s=$SHIM_S" \
		"plain_mib=$PLAIN_MIB budget_mib=$BUDGET_MB peak_mib=$PEAK_MIB"
	exit 1
}
skip() {
	echo "SKIP $PROG ($SCALE): $*"
	echo "result $PROG $SCALE $POLICY skip ($*)"
	exit 77
}
case $POLICY in
quarter | half | ample) ;;
*) fail "unknown budget $POLICY (quarter, half, ample)" ;;
esac
PY=/usr/bin/python3
pyhas() { # module: skip unless Debian's python3 has it
	[ -x $PY ] || skip "$PY not installed"
	$PY -c "import $1" 2>/dev/null || skip "python3 module $1 not installed"
}

[ -x /usr/bin/time ] || skip "/usr/bin/time not installed (peak RSS)"
[ -x "$MEMD" ] || skip "no memd at $MEMD"
[ -r "$SHIM" ] || skip "no shim at $SHIM"
case $PROG in
sqlite3) command -v sqlite3 >/dev/null || skip "sqlite3 not installed" ;;
python3) [ -x /usr/bin/python3 ] || skip "/usr/bin/python3 not installed" ;;
sort) command -v sort >/dev/null || skip "sort not installed" ;;
threads) [ -x "$TPP" ] || skip "no $TPP (build tests)" ;;
numpy) pyhas numpy ;;
torch) pyhas torch ;;
deepbind)
	[ -x $PY ] || skip "$PY not installed"
	[ -r "$BUILD/tests/libtp_deepbind.so" ] ||
		skip "no $BUILD/tests/libtp_deepbind.so (build tests)"
	;;
perl | gcc | git | node | xz)
	command -v "$PROG" >/dev/null || skip "$PROG not installed"
	;;
redis)
	for c in redis-server redis-cli redis-benchmark; do
		command -v $c >/dev/null || skip "$c not installed"
	done
	;;
shell) [ -x $PY ] || skip "$PY not installed" ;;
*) fail "unknown program (sqlite3, python3, sort, threads, numpy, torch, perl, gcc, git, node, redis, xz, shell, deepbind)" ;;
esac

# shellcheck source=deploy/scratch-lib.sh
. "$SRC/deploy/scratch-lib.sh"
scratch_start tp-programs
TMP=$SCRATCH

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
numpy)
	n=2000000
	[ "$SCALE" = full ] && n=16000000 DONATE=3G
	cat >"$TMP/prog.py" <<EOF
import numpy as np
rng = np.random.default_rng(5)
a = rng.standard_normal((800, 800))
b = a @ a.T
s = np.sort(rng.integers(0, 1 << 40, $n))
print(np.ones(10**6).sum(), "%.6f" % b.trace(), int(s[::1000].sum() % 1000003),
      "%.6f" % np.linalg.norm(a[:200, :200]))
EOF
	CMD=($PY "$TMP/prog.py")
	;;
torch)
	dl=1 DONATE=3G
	cat >"$TMP/prog.py" <<EOF
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(512, 256)
y = (x @ x.T).sum(1)
net = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(),
                          torch.nn.Linear(128, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for step in range(5):
    loss = torch.nn.functional.cross_entropy(net(x), torch.arange(512) % 10)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss %.5f" % loss.item(), "y %.3f" % y.sum().item())
if $dl:
    ds = torch.utils.data.TensorDataset(
        torch.arange(4000, dtype=torch.float32).reshape(1000, 4))
    dl = torch.utils.data.DataLoader(ds, batch_size=50, num_workers=2)
    print("dl", sum(float(b[0].sum()) for b in dl))
EOF
	CMD=($PY "$TMP/prog.py")
	;;
perl)
	n=200000
	[ "$SCALE" = full ] && n=2000000 DONATE=3G
	CMD=(perl -e 'my %h; $h{$_ * 7} = "v$_" x 3 for 1..'$n'; my $s = 0;
		$s = ($s * 31 + length($h{$_})) % 1000003 for sort { $a <=> $b } keys %h;
		print scalar(keys %h), " $s\n"')
	;;
gcc)
	CMD=(gcc -O2 -S -o - -w -I"$SRC" -I"$SRC/include" "$SRC/libpool/paging.c")
	;;
git)
	git -C "$SRC" rev-parse HEAD >/dev/null 2>&1 || skip "$SRC is not a git checkout"
	n=(-n 300)
	[ "$SCALE" = full ] && n=()
	CMD=(git -C "$SRC" log -p --no-color "${n[@]}" HEAD)
	;;
node)
	n=200000
	[ "$SCALE" = full ] && n=2000000 DONATE=3G
	CMD=(node -e 'const m = new Map();
		for (let i = 0; i < '$n'; i++) m.set("k" + i, { i, s: "x".repeat(i % 50) });
		let h = 0;
		for (const [k, v] of m) h = (h * 31 + v.s.length + k.length) % 1000003;
		console.log(m.size, h)')
	;;
redis)
	n=20000
	[ "$SCALE" = full ] && n=400000 DONATE=3G
	mkdir "$TMP/redis"
	CMD=(bash "$SRC/tests/programs/redis.sh" "$TMP/redis" "$n")
	;;
xz)
	mib=4
	[ "$SCALE" = full ] && mib=64
	[ -x "$TPP" ] || skip "no $TPP (the input generator)"
	"$TPP" lines "$mib" >"$TMP/in.txt" || fail "generating the input"
	CMD=(xz -6 -T1 -c "$TMP/in.txt")
	;;
shell)
	n=100
	[ "$SCALE" = full ] && n=1000
	cat >"$TMP/prog.sh" <<EOF
s=0
for i in \$(seq 1 $n); do
	x=\$(echo \$i | tr 0-9 a-j)
	s=\$(( (s * 31 + \${#x} + \$(printf %s "\$x" | wc -c)) % 1000003 ))
	( : ) &
	wait
done
echo \$s
$PY -c '
import os, subprocess
t = 0
for i in range($n // 10):
    p = os.posix_spawn("/bin/echo", ["echo", str(i)], os.environ)
    os.waitpid(p, 0)
    t += len(subprocess.run(["/bin/cat", "/etc/hostname"], capture_output=True).stdout)
    if os.fork() == 0:
        os._exit(0)
    os.wait()
print(t)
' | tail -n1
EOF
	CMD=(bash "$TMP/prog.sh")
	;;
deepbind)
	n=2000
	[ "$SCALE" = full ] && n=20000
	cat >"$TMP/prog.py" <<EOF
import ctypes, os, zlib
lib = ctypes.CDLL("$BUILD/tests/libtp_deepbind.so",
                  mode=os.RTLD_NOW | os.RTLD_DEEPBIND)
libc = ctypes.CDLL(None)
for f in (lib.tp_deepbind_dup, lib.tp_deepbind_grow, libc.malloc):
    f.restype = ctypes.c_void_p
lib.tp_deepbind_dup.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.tp_deepbind_grow.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
lib.tp_deepbind_free.argtypes = [ctypes.c_void_p]
libc.free.argtypes = [ctypes.c_void_p]
libc.malloc.argtypes = [ctypes.c_size_t]
h = 0
for i in range(1, $n):
    p = libc.malloc(i * 8)
    ctypes.memset(p, i % 251, i * 8)
    p = lib.tp_deepbind_grow(p, i * 16)
    h = zlib.crc32(ctypes.string_at(p, i * 8), h)
    lib.tp_deepbind_free(p)
    q = lib.tp_deepbind_dup(b"pooled", i)
    h = zlib.crc32(ctypes.string_at(q, 6 * i), h)
    libc.free(q)
print($n, "%08x" % h)
EOF
	CMD=($PY "$TMP/prog.py")
	;;
esac

# ---- memd --------------------------------------------------------------
"$MEMD" --listen 127.0.0.1:0 --donate "$DONATE" --log-level warning \
	--ready-file "$TMP/ready" >"$TMP/memd.log" 2>&1 &
SERVER_PID=$!
# memd locks its donation in memory at start: seconds per GiB on a busy VM
for _ in $(seq 1200); do
	[ -s "$TMP/ready" ] && break
	kill -0 "$SERVER_PID" 2>/dev/null || skip "memd exited: $(cat "$TMP/memd.log")"
	sleep 0.1
done
[ -s "$TMP/ready" ] || skip "memd not ready after 120 s"
ADDR=$(head -n1 "$TMP/ready")

# ---- plain, then under the shim ----------------------------------------
t0=$(date +%s) m0=$(date +%s%3N)
/usr/bin/time -f %M -o "$TMP/plain.rss" "${CMD[@]}" <"$IN" \
	>"$TMP/plain.out" 2>"$TMP/plain.err" ||
	fail "plain run exited $?: $(tail -3 "$TMP/plain.err")"
t1=$(date +%s) m1=$(date +%s%3N)
plain_kb=$(tail -n1 "$TMP/plain.rss")
PLAIN_S=$(((m1 - m0) / 1000)).$(printf %03d $(((m1 - m0) % 1000))) PLAIN_MIB=$((plain_kb / 1024))
case $POLICY in
half) BUDGET_MB=$((plain_kb / 1024 / 2)) ;;
ample) BUDGET_MB=$((plain_kb / 1024 * 2 + 64)) ;;
*) [ -n "$BUDGET_MB" ] || BUDGET_MB=$((plain_kb / 1024 / 4)) ;;
esac
[ "$BUDGET_MB" -ge 16 ] || BUDGET_MB=16
/usr/bin/time -f %M -o "$TMP/shim.rss" env LD_PRELOAD="$SHIM" \
	LIBPOOL_ADDR="$ADDR" LIBPOOL_LOCAL_BYTES="${BUDGET_MB}M" \
	LIBPOOL_PRELOAD_STATS="$TMP/stats" ${TP_PROGRAMS_ENV:-} \
	"${CMD[@]}" <"$IN" >"$TMP/shim.out" 2>"$TMP/shim.err" ||
	fail "shim run exited $?: $(tail -3 "$TMP/shim.err")"
t2=$(date +%s) m2=$(date +%s%3N)
shim_kb=$(tail -n1 "$TMP/shim.rss")
SHIM_S=$(((m2 - m1) / 1000)).$(printf %03d $(((m2 - m1) % 1000))) PEAK_MIB=$((shim_kb / 1024))
stats=$(grep -h '^libpool-preload: stats' "$TMP/stats" 2>/dev/null | tail -n1)
statmax() { # key: the largest over every process's stats line
	grep -h '^libpool-preload: stats' "$TMP/stats" 2>/dev/null |
		tr ' ' '\n' | sed -n "s/^$1=//p" | sort -n | tail -n1
}
pooled=$(statmax pooled_bytes)
rss_file=$(statmax rss_file_bytes)
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
if [ "$PROG" != node ]; then
	file_mb=$((${rss_file:-0} / 1048576))
	limit_mb=$((BUDGET_MB + OVERHEAD_MB + pooled / 32 / 1048576 + file_mb))
	[ $((shim_kb / 1024)) -le $limit_mb ] ||
		fail "peak RSS $((shim_kb / 1024)) MiB > budget ${BUDGET_MB} MiB + ${OVERHEAD_MB} MiB + pooled/32 + file-backed ${file_mb} MiB = $limit_mb MiB"
	[ "$pooled" -ge $(((plain_kb - shim_kb) * 1024)) ] ||
		fail "pooled_bytes=$pooled < plain peak - shim peak ($(((plain_kb - shim_kb) / 1024)) MiB)"
fi
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
echo "PASS $PROG ($SCALE, $POLICY)"
echo "result $PROG $SCALE $POLICY pass plain_s=$PLAIN_S shim_s=$SHIM_S" \
	"plain_mib=$PLAIN_MIB budget_mib=$BUDGET_MB peak_mib=$PEAK_MIB"
