#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_poolbench.sh - poolbench with its baselines, side by side.
#
# Starts a memd on loopback (free port), then runs REPS repetitions of
#   poolbench   libpool reads/writes against that memd over the fabric
#               (LIBPOOL_SHM=off)
#   poolbench_shm  the same on the same-host path (slab memfds, pread/
#               pwrite; memd.conf(5) shm), unless SHM=0
#   rawfab      the same RMA through fabric/fab.h, no memd, no libpool
#               (target in a thread; again with --target-process)
#   memcpy      local copies (poolbench memcpy)
#   iperf3      TCP on loopback with 1 and 2 streams (IPERF_STREAMS; the
#               transport's ceiling)
#   redis       redis-benchmark GET/SET of the same sizes, -c = depth
#   memcached   bench/mcbench GET/SET of the same sizes, depth
#               connections with one request in flight each
# and prints the medians, the ratios the targets are set on, and
# machine-readable "median ..." and "ratio ..." lines. The servers' CPU
# time (utime+stime, /proc/PID/stat) is read over every point of memd
# (poolbench --server-pid), memcached (mcbench --server-pid) and
# redis-server (around each redis-benchmark run): CPU per op and per GB
# moved side by side. Builds nothing.
#
# usage: bench/run_poolbench.sh [BUILD_DIR]     (or BUILD=dir; default
#        build-bench at the repository root)
#        bench/run_poolbench.sh --summarize RAW.txt...   medians over runs
# Knobs (environment):
#   REPS=3 POINT_SECONDS=1 WARMUP=0.1 SIZES=4K,64K,1M,4M DEPTHS=1,4,16
#   SHM=1 (0: no poolbench_shm run) SHM_MODE=auto (LIBPOOL_SHM of the
#   poolbench_shm run: auto = pread/pwrite, map = reads through mappings)
#   SHM_DIR=<dir on a tmpfs mounted huge=always>: a second memd with
#   memd.conf(5) shm_dir there, and poolbench_shmdir against it (the
#   same-host path on 2 MiB pages; writes go over the fabric)
#   PROC_SIZES=4K,1M (read sizes of the rawfab --target-process baseline)
#   REDIS_SECONDS=2 IPERF_SECONDS=5 IPERF_STREAMS=1,2
#   MEMCACHED_THREADS=2 (memcached -t; see bench/README.md)
#   MEMCACHED_SECONDS=<POINT_SECONDS> (measured seconds of an mcbench point)
#   OUT_DIR=<BUILD>/poolbench-results/<time>
#   POOLBENCH_ARGS / RAWFAB_ARGS: extra arguments for those two
# Everything listens on 127.0.0.1 only; every server started here is
# killed on exit. With the defaults it takes about 10 minutes.
set -euo pipefail

# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
BUILD=${1:-${BUILD:-$ROOT/build-bench}}
REPS=${REPS:-3}
POINT_SECONDS=${POINT_SECONDS:-1}
WARMUP=${WARMUP:-0.1}
SIZES=${SIZES:-4K,64K,1M,4M}
DEPTHS=${DEPTHS:-1,4,16}
PROC_SIZES=${PROC_SIZES:-4K,1M}
REDIS_SECONDS=${REDIS_SECONDS:-2}
IPERF_SECONDS=${IPERF_SECONDS:-5}
IPERF_STREAMS=${IPERF_STREAMS:-1,2}
MEMCACHED_THREADS=${MEMCACHED_THREADS:-2}
MEMCACHED_SECONDS=${MEMCACHED_SECONDS:-$POINT_SECONDS}
OUT_DIR=${OUT_DIR:-$BUILD/poolbench-results/$(date +%Y%m%d-%H%M%S)}
POOLBENCH_ARGS=${POOLBENCH_ARGS:-}
SHM=${SHM:-1}
SHM_MODE=${SHM_MODE:-auto}
SHM_DIR=${SHM_DIR:-}
RAWFAB_ARGS=${RAWFAB_ARGS:-}

bench_python

# Medians, tables and ratios over the result lines of one or more raw.txt
# files (several runs may be summarised together).
summarize() {
	bench_summarize_py "$@" <<'EOF'
import statistics, sys
from collections import defaultdict
from benchutil import load, median, fmt

# a point: (bench, op, size, depth)
rows, comments = load(sys.argv[1:], lambda b, kv: (
    b, kv.get("op"), int(kv.get("size", 0)), int(kv.get("depth", 1))))

FIELDS = ("ops_s", "MBps", "p50_us", "p99_us", "mean_us", "cpu_us",
          "srv_cpu_us", "srv_cpu_s_per_GB")

def med(bench, op, size, depth=1, field="ops_s"):
    return median(rows, (bench, op, size, depth), field)

# Run-level comments as they are; the per-program headers only for the
# connection set-up time they carry (median per program).
connect = defaultdict(list)
for c in comments:
    w = c.split()
    if len(w) > 1 and w[1] in ("poolbench", "rawfab", "memcpy", "mcbench"):
        kv = dict(x.split("=", 1) for x in w[2:] if "=" in x)
        if "connect_ms" in kv:
            name = w[1] + ("_proc" if kv.get("target") == "process" else "")
            connect[name].append(float(kv["connect_ms"]))
        continue
    print(c)
if connect:
    print("# connect_ms (first RMA of a session), median: " +
          " ".join(f"{k}={statistics.median(v):.1f}"
                   for k, v in sorted(connect.items())))
print()
sizes = sorted({k[2] for k in rows if k[0] == "poolbench"})
depths = sorted({k[3] for k in rows if k[0] == "poolbench"})
nreps = max((len(v) for v in rows.values()), default=0)

def hsize(b):
    for u, s in (("M", 20), ("K", 10)):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{u}"
    return str(b)

for op, rop in (("read", "get"), ("write", "set")):
    print(f"{op.upper()}S: medians of {nreps} repetitions "
          f"(ops/s, MB/s = 1e6 B/s, latency us)")
    print(f"{'':>11} | {'poolbench (libpool + memd)':<35} | "
          f"{'rawfab, thread target':<26} | {'rawfab, process':<17} | "
          f"{'redis ' + rop.upper():<25} | memcached {rop.upper()}")
    print(f"{'size':>5} {'depth':>5} | {'ops/s':>9} {'MB/s':>7} "
          f"{'p50':>7} {'p99':>8} | {'ops/s':>9} {'MB/s':>7} "
          f"{'p50':>8} | {'MB/s':>8} {'p50':>8} | {'ops/s':>9} "
          f"{'MB/s':>7} {'p50':>7} | {'ops/s':>9} {'MB/s':>7} {'p50':>7}")
    for s in sizes:
        for d in depths:
            print(f"{hsize(s):>5} {d:>5} | "
                  f"{fmt(med('poolbench', op, s, d)):>9} "
                  f"{fmt(med('poolbench', op, s, d, 'MBps')):>7} "
                  f"{fmt(med('poolbench', op, s, d, 'p50_us'), 1):>7} "
                  f"{fmt(med('poolbench', op, s, d, 'p99_us'), 1):>8} | "
                  f"{fmt(med('rawfab', op, s, d)):>9} "
                  f"{fmt(med('rawfab', op, s, d, 'MBps')):>7} "
                  f"{fmt(med('rawfab', op, s, d, 'p50_us'), 1):>8} | "
                  f"{fmt(med('rawfab_proc', op, s, d, 'MBps')):>8} "
                  f"{fmt(med('rawfab_proc', op, s, d, 'p50_us'), 1):>8} | "
                  f"{fmt(med('redis', rop, s, d)):>9} "
                  f"{fmt(med('redis', rop, s, d, 'MBps')):>7} "
                  f"{fmt(med('redis', rop, s, d, 'p50_us'), 1):>7} | "
                  f"{fmt(med('memcached', rop, s, d)):>9} "
                  f"{fmt(med('memcached', rop, s, d, 'MBps')):>7} "
                  f"{fmt(med('memcached', rop, s, d, 'p50_us'), 1):>7}")
    print()

print("SERVER CPU: medians of the server process's utime+stime over each "
      "point (/proc/PID/stat, 10 ms ticks)")
print("  us/op = CPU microseconds per operation; s/GB = CPU seconds per 1e9 "
      "bytes moved")
print(f"{'':>17} | {'memd (poolbench)':<17} | {'redis-server':<17} | "
      f"{'memcached':<17}")
print(f"{'op':>5} {'size':>5} {'depth':>5} | "
      + " | ".join(f"{'us/op':>8} {'s/GB':>8}" for _ in range(3)))
for op, rop in (("read", "get"), ("write", "set")):
    for s in sizes:
        for d in depths:
            cells = []
            for b, o in (("poolbench", op), ("redis", rop), ("memcached", rop)):
                cells.append(f"{fmt(med(b, o, s, d, 'srv_cpu_us'), 2):>8} "
                             f"{fmt(med(b, o, s, d, 'srv_cpu_s_per_GB'), 3):>8}")
            print(f"{op:>5} {hsize(s):>5} {d:>5} | " + " | ".join(cells))
print()

def same_host(a, b, title, b_name):
    """Bench a against bench b (and memcpy), medians."""
    print(title)
    print(f"{'':>11} | {a:<35} | {b_name:<26} | memcpy")
    print(f"{'size':>5} {'depth':>5} | {'ops/s':>9} {'MB/s':>7} "
          f"{'p50':>7} {'p99':>8} | {'ops/s':>9} {'MB/s':>7} {'p50':>8} | {'MB/s':>8}")
    for op in ("read", "write"):
        for s in sizes:
            for d in depths:
                print(f"{hsize(s):>5} {d:>5} | "
                      f"{fmt(med(a, op, s, d)):>9} "
                      f"{fmt(med(a, op, s, d, 'MBps')):>7} "
                      f"{fmt(med(a, op, s, d, 'p50_us'), 1):>7} "
                      f"{fmt(med(a, op, s, d, 'p99_us'), 1):>8} | "
                      f"{fmt(med(b, op, s, d)):>9} "
                      f"{fmt(med(b, op, s, d, 'MBps')):>7} "
                      f"{fmt(med(b, op, s, d, 'p50_us'), 1):>8} | "
                      f"{fmt(med('memcpy', op, s, 1, 'MBps')):>8}   {op}")
    print()

if any(k[0] == "poolbench_shm" for k in rows):
    same_host("poolbench_shm", "poolbench",
              "SAME-HOST (shm: slab memfds, pread/pwrite) vs fabric (tcp), medians",
              "poolbench (fabric)")
if any(k[0] == "poolbench_shmdir" for k in rows):
    same_host("poolbench_shmdir", "poolbench_shm",
              "SAME-HOST, slabs in shm_dir (tmpfs files) vs memfds, medians",
              "poolbench_shm (memfd)")

print("BASELINES: medians")
for s in sizes:
    print(f"  memcpy {hsize(s):>4}: read {fmt(med('memcpy', 'read', s, 1, 'MBps'))} MB/s, "
          f"write {fmt(med('memcpy', 'write', s, 1, 'MBps'))} MB/s")
iperf = med("iperf3", "stream", 0, 1, "MBps")
print(f"  iperf3 single TCP stream on loopback: {fmt(iperf)} MB/s")
for n in sorted({k[3] for k in rows if k[0] == "iperf3"} - {1}):
    print(f"  iperf3 {n} TCP streams (-P {n}) on loopback: "
          f"{fmt(med('iperf3', 'stream', 0, n, 'MBps'))} MB/s")
print()

# machine-readable medians
for (bench, op, size, depth), v in sorted(rows.items()):
    parts = [f"median bench={bench} op={op} size={size} depth={depth} n={len(v)}"]
    for f in FIELDS:
        m = med(bench, op, size, depth, f)
        if m is not None:
            parts.append(f"{f}={m:.1f}")
    print(" ".join(parts))
print()

def ratio(name, num, den, target=None, higher_is_better=True, note=""):
    """target None: informational, no pass/fail."""
    if num is None or den is None or den == 0:
        print(f"ratio name={name} value=n/a target={target or 'none'} "
              f"pass=n/a {note}".rstrip())
        return
    v = num / den
    verdict = "n/a"
    if target:
        t = float(target.lstrip("<>="))
        verdict = "yes" if (v >= t if higher_is_better else v <= t) else "no"
    print(f"ratio name={name} value={v:.2f} target={target or 'none'} "
          f"pass={verdict} num={num:.1f} den={den:.1f} {note}".rstrip())

K4, M1 = 4096, 1 << 20
print("RATIOS vs targets (medians)")
# issue 19's targets (docs/bench/poolbench.md, "Standing on a quiet
# machine"): 4 KiB reads >= 1.0x Redis GET at depth 1 and >= 2.5x at 16,
# 1 MiB reads >= 1.2x at both; other depths are reported without one
T4K = {1: ">=1.0", 16: ">=2.5"}
T1M = {1: ">=1.2", 16: ">=1.2"}
for d in depths:
    ratio(f"read4k_ops_vs_redis_get_d{d}", med("poolbench", "read", K4, d),
          med("redis", "get", K4, d), T4K.get(d))
    ratio(f"read4k_ops_vs_memcached_get_d{d}", med("poolbench", "read", K4, d),
          med("memcached", "get", K4, d))
dmax = max(depths) if depths else 16
ratio(f"read1m_MBps_vs_iperf3_d{dmax}", med("poolbench", "read", M1, dmax, "MBps"),
      iperf, ">=0.9")
best = max(((m, d) for d in depths
            if (m := med("poolbench", "read", M1, d, "MBps")) is not None),
           default=(None, 0))
ratio("read1m_best_MBps_vs_iperf3", best[0], iperf, ">=0.9", note=f"best_depth={best[1]}")
for n in sorted({k[3] for k in rows if k[0] == "iperf3"} - {1}):
    ratio(f"read1m_best_MBps_vs_iperf3_{n}streams", best[0],
          med("iperf3", "stream", 0, n, "MBps"), note=f"best_depth={best[1]}")
    ratio(f"iperf3_{n}streams_vs_1stream", med("iperf3", "stream", 0, n, "MBps"),
          iperf)
for d in depths:
    ratio(f"read1m_MBps_vs_redis_get_d{d}", med("poolbench", "read", M1, d, "MBps"),
          med("redis", "get", M1, d, "MBps"), T1M.get(d))
    ratio(f"read1m_MBps_vs_memcached_get_d{d}",
          med("poolbench", "read", M1, d, "MBps"),
          med("memcached", "get", M1, d, "MBps"))
for s in sizes:
    for d in depths:
        for peer in ("redis", "memcached"):
            ratio(f"srv_cpu_per_GB_memd_vs_{peer}_read{hsize(s).lower()}_d{d}",
                  med("poolbench", "read", s, d, "srv_cpu_s_per_GB"),
                  med(peer, "get", s, d, "srv_cpu_s_per_GB"),
                  higher_is_better=False)
def reads(name, bench, base, size, d, field="ops_s", target=None,
          base_d=None, **kw):
    """ratio of bench's reads to base's (at depth base_d, default d)."""
    ratio(name, med(bench, "read", size, d, field),
          med(base, "read", size, d if base_d is None else base_d, field),
          target, **kw)

reads("read4k_p50_pool_vs_raw_d1", "poolbench", "rawfab", K4, 1, "p50_us",
      "<=1.2", higher_is_better=False)
reads("read4k_p50_pool_vs_rawproc_d1", "poolbench", "rawfab_proc", K4, 1,
      "p50_us", "<=1.2", higher_is_better=False,
      note="target_in_a_process_like_memd")
reads("read4k_ops_pool_vs_raw_d1", "poolbench", "rawfab", K4, 1)
for d in depths:
    reads(f"read1m_shm_MBps_vs_memcpy_d{d}", "poolbench_shm", "memcpy", M1, d,
          "MBps", ">=0.3", base_d=1)
    ratio(f"read1m_shm_MBps_vs_redis_get_d{d}",
          med("poolbench_shm", "read", M1, d, "MBps"),
          med("redis", "get", M1, d, "MBps"), ">=1.2")
    ratio(f"read4k_shm_ops_vs_redis_get_d{d}",
          med("poolbench_shm", "read", K4, d), med("redis", "get", K4, d))
    reads(f"read4k_p50_shm_vs_fabric_d{d}", "poolbench_shm", "poolbench", K4,
          d, "p50_us", higher_is_better=False)
if any(k[0] == "poolbench_shmdir" for k in rows):
    for d in depths:
        reads(f"read1m_shmdir_MBps_vs_memcpy_d{d}", "poolbench_shmdir",
              "memcpy", M1, d, "MBps", ">=0.3", base_d=1)
        reads(f"read1m_shmdir_MBps_vs_shm_d{d}", "poolbench_shmdir",
              "poolbench_shm", M1, d, "MBps")
        reads(f"read4k_p50_shmdir_vs_shm_d{d}", "poolbench_shmdir",
              "poolbench_shm", K4, d, "p50_us", higher_is_better=False)
reads(f"read1m_MBps_pool_vs_raw_d{dmax}", "poolbench", "rawfab", M1, dmax,
      "MBps")
EOF
}
bench_cli 4 43 "$@"

MEMD=$BUILD/memd/memd
POOLBENCH=$BUILD/bench/poolbench
RAWFAB=$BUILD/bench/rawfab
MCBENCH=$BUILD/bench/mcbench
bench_need "$MEMD" "$POOLBENCH" "$RAWFAB" "$MCBENCH"
[[ $REPS =~ ^[1-9][0-9]*$ ]] || die "REPS must be a positive count"
[[ $IPERF_STREAMS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
	die "IPERF_STREAMS must be stream counts like 1,2"
[[ $MEMCACHED_THREADS =~ ^[1-9][0-9]*$ ]] ||
	die "MEMCACHED_THREADS must be a positive count"

bench_out poolbench

START_TIME=$(date +%s)
{
	echo "# run_poolbench $(date -u +%FT%TZ) git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	# shellcheck source=/dev/null
	echo "# host cpus=$(nproc) kernel=$(uname -r) os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" | tr ' ' _)"
	echo "# libfabric=$(fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p' || echo unknown) loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
	echo "# shm=$SHM shm_mode=$SHM_MODE shm_dir=${SHM_DIR:-none} reps=$REPS point_seconds=$POINT_SECONDS warmup=$WARMUP sizes=$SIZES depths=$DEPTHS proc_sizes=$PROC_SIZES redis_seconds=$REDIS_SECONDS iperf_seconds=$IPERF_SECONDS iperf_streams=$IPERF_STREAMS memcached_threads=$MEMCACHED_THREADS memcached_seconds=$MEMCACHED_SECONDS"
	env | grep -E '^(FI_|LIBPOOL_)' | sed 's/^/# env /' || true
} >>"$RAW"

# ---- memd ---------------------------------------------------------------
log "starting memd on 127.0.0.1 (1G donated, 64M slabs)"
bench_start_memd "$OUT_DIR/memd.log" --donate 1G --slab-size 64M
log "memd ready at $MEMD_ADDR"
if [ -n "$SHM_DIR" ]; then
	[ "$SHM" = 1 ] || die "SHM_DIR needs SHM=1"
	{
		echo "# shm_dir_mount $(findmnt -no FSTYPE,OPTIONS --target "$SHM_DIR" || echo unknown)"
		echo "# shmem_enabled $(cat /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || echo unknown)"
	} >>"$RAW"
	MEMD1_ADDR=$MEMD_ADDR
	MEMD1_PID=$MEMD_PID
	rm -f "$TMP/memd.ready"
	log "starting a second memd with shm_dir=$SHM_DIR (1G donated, 64M slabs)"
	bench_start_memd "$OUT_DIR/memd-shmdir.log" --donate 1G --slab-size 64M \
		--set "shm_dir=$SHM_DIR"
	MEMD_SHMDIR_ADDR=$MEMD_ADDR
	MEMD_SHMDIR_PID=$MEMD_PID
	MEMD_ADDR=$MEMD1_ADDR
	MEMD_PID=$MEMD1_PID
	log "memd (shm_dir) ready at $MEMD_SHMDIR_ADDR"
fi

# ---- redis, memcached ---------------------------------------------------
bench_start_redis redis-server redis-benchmark
HZ=$(getconf CLK_TCK)

size_bytes() { # 4096, 4K, 64KiB, 1M -> bytes
	local s=${1^^} shift=0
	s=${s%B}
	s=${s%I}
	case $s in
	*K) shift=10 ;;
	*M) shift=20 ;;
	*G) shift=30 ;;
	esac
	[ $shift = 0 ] || s=${s%?}
	[[ $s =~ ^[0-9]+$ ]] || die "bad size '$1' (want 4K, 64K, 1M, ...)"
	echo $((s << shift))
}

# memcached's item limit (-I) above the largest value (with room for the
# item header), and memory (-m) for its keys of every size (mcbench sets
# 16 keys a size; memcached takes -I's worth of slab pages per class).
MC_MAX=0
for s in ${SIZES//,/ }; do
	b=$(size_bytes "$s")
	[ "$b" -le "$MC_MAX" ] || MC_MAX=$b
done
MC_ITEM_MB=$(((MC_MAX >> 20) + 2))
bench_start_memcached -t "$MEMCACHED_THREADS" -I "${MC_ITEM_MB}m" \
	-m $((1024 + 64 * MC_ITEM_MB))
[ $HAVE_MEMCACHED = 0 ] || log "memcached ready on 127.0.0.1:$MEMCACHED_PORT (-t $MEMCACHED_THREADS -I ${MC_ITEM_MB}m)"

# redis-benchmark --csv: "SET","rps","avg_ms","min_ms","p50_ms","p95_ms",
# "p99_ms","max_ms" -> our line format
# With n (requests) and ticks (redis-server's CPU over the run), the
# server's CPU per op and per GB too.
redis_lines() { # size depth csvfile [n ticks]
	"$PY" - "$1" "$2" "$3" "${4:-0}" "${5:-}" "$HZ" <<'EOF'
import csv, sys
size, depth, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
ticks, hz = sys.argv[5], int(sys.argv[6])
for row in csv.reader(open(sys.argv[3])):
    if not row or row[0] not in ("SET", "GET"):
        continue
    rps = float(row[1])
    srv = ""
    if n > 0 and ticks != "":
        cpu_s = int(ticks) / hz
        srv = " srv_cpu_us=%.2f srv_cpu_s_per_GB=%.4f" % (
            cpu_s * 1e6 / n, cpu_s / (n * size / 1e9))
    print("redis op=%s size=%d depth=%d threads=1 api=resp ops_s=%.0f "
          "MBps=%.1f p50_us=%.1f p99_us=%.1f%s" %
          (row[0].lower(), size, depth, rps, rps * size / 1e6,
           float(row[4]) * 1e3, float(row[6]) * 1e3, srv))
EOF
}

# -n per (test, size, depth) so that each SET and each GET test runs about
# REDIS_SECONDS: measured once with a short probe, not guessed.
declare -A REDIS_N
redis_calibrate() {
	local s b d t probe rps
	for s in ${SIZES//,/ }; do
		b=$(size_bytes "$s")
		for d in ${DEPTHS//,/ }; do
			probe=$((b >= 1048576 ? 40 : 1000))
			run_cmd redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t set,get \
				-d "$b" -c "$d" -P 1 -n "$probe" --csv \
				>"$TMP/probe.csv" 2>>"$OUT_DIR/redis-benchmark.err" || true
			for t in set get; do
				rps=$(redis_lines "$b" "$d" "$TMP/probe.csv" |
					sed -n "s/^redis op=$t .*ops_s=\([0-9]*\).*/\1/p")
				if [ -z "$rps" ]; then
					log "redis-benchmark $t failed at size $s depth $d (see $OUT_DIR/redis-benchmark.err); skipping it"
					REDIS_N[$t.$b.$d]=0
					continue
				fi
				REDIS_N[$t.$b.$d]=$("$PY" -c "print(max(50, int($rps * $REDIS_SECONDS)))")
			done
		done
	done
}

# SET first, on the one key every test uses (no -r): GET then returns
# values of the full size. redis-server's CPU time is read around each
# run (it includes the run's connection set-up: a few ms at most).
run_redis() { # rep
	local s b d t n c0 c1
	for s in ${SIZES//,/ }; do
		b=$(size_bytes "$s")
		for d in ${DEPTHS//,/ }; do
			for t in set get; do
				n=${REDIS_N[$t.$b.$d]}
				[ "$n" -gt 0 ] || continue
				c0=$(bench_cpu_ticks "$REDIS_PID")
				if run_cmd redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -t "$t" \
					-d "$b" -c "$d" -P 1 -n "$n" --csv \
					>"$TMP/redis.csv" 2>>"$OUT_DIR/redis-benchmark.err"; then
					c1=$(bench_cpu_ticks "$REDIS_PID")
					redis_lines "$b" "$d" "$TMP/redis.csv" "$n" $((c1 - c0)) |
						sed "s/\$/ rep=$1/" >>"$RAW"
				else
					log "redis-benchmark $t size=$s depth=$d failed"
				fi
			done
		done
	done
}

run_iperf() { # rep streams
	local port pid ok=0
	command -v iperf3 >/dev/null || {
		log "iperf3 not installed; skipping it"
		return 0
	}
	port=$(free_port)
	iperf3 -s -1 -B 127.0.0.1 -p "$port" >"$TMP/iperf-server.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	# Wait until it listens (a probe connection would be its one test);
	# it has been seen to take seconds on a loaded VM.
	for _ in $(seq 300); do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	for _ in $(seq 50); do
		if run_cmd iperf3 -c 127.0.0.1 -p "$port" -t "$IPERF_SECONDS" \
			-P "$2" -J \
			>"$TMP/iperf.json" 2>/dev/null; then
			ok=1
			break
		fi
		# refused while the server starts: try again
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	# a server no client reached would wait for ever
	[ $ok = 1 ] || kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	if [ $ok = 0 ]; then
		log "iperf3 failed (server log: $(tr '\n' ' ' <"$TMP/iperf-server.log"))"
		return 0
	fi
	# depth= is the stream count (-P)
	"$PY" - "$TMP/iperf.json" "$1" "$2" >>"$RAW" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
bps = j["end"]["sum_received"]["bits_per_second"]
secs = j["end"]["sum_received"]["seconds"]
print("iperf3 op=stream size=0 depth=%s threads=1 api=tcp secs=%.3f "
      "MBps=%.1f streams=%s rep=%s" % (sys.argv[3], secs, bps / 8 / 1e6,
                                      sys.argv[3], sys.argv[2]))
EOF
}

if [ $HAVE_REDIS = 1 ]; then
	log "calibrating redis-benchmark request counts (~${REDIS_SECONDS}s per SET or GET test)"
	redis_calibrate
fi

for rep in $(seq "$REPS"); do
	log "rep $rep/$REPS: poolbench"
	# shellcheck disable=SC2086
	LIBPOOL_SHM=off run_cmd "$POOLBENCH" run --addr "$MEMD_ADDR" \
		--sizes "$SIZES" --depths "$DEPTHS" --seconds "$POINT_SECONDS" \
		--warmup "$WARMUP" --server-pid "$MEMD_PID" $POOLBENCH_ARGS \
		>"$TMP/out" ||
		die "poolbench failed (memd log: $OUT_DIR/memd.log)"
	tag "$rep" <"$TMP/out" >>"$RAW"
	if [ "$SHM" = 1 ]; then
		log "rep $rep/$REPS: poolbench over shm (same host)"
		# shellcheck disable=SC2086
		LIBPOOL_SHM=$SHM_MODE run_cmd "$POOLBENCH" run --addr "$MEMD_ADDR" \
			--sizes "$SIZES" --depths "$DEPTHS" \
			--seconds "$POINT_SECONDS" --warmup "$WARMUP" \
			--server-pid "$MEMD_PID" $POOLBENCH_ARGS >"$TMP/out" ||
			die "poolbench (shm) failed (memd log: $OUT_DIR/memd.log)"
		sed 's/^poolbench /poolbench_shm /' "$TMP/out" | tag "$rep" >>"$RAW"
	fi
	if [ -n "$SHM_DIR" ]; then
		log "rep $rep/$REPS: poolbench over shm, slabs in shm_dir"
		# shellcheck disable=SC2086
		LIBPOOL_SHM=$SHM_MODE run_cmd "$POOLBENCH" run \
			--addr "$MEMD_SHMDIR_ADDR" --sizes "$SIZES" \
			--depths "$DEPTHS" --seconds "$POINT_SECONDS" \
			--warmup "$WARMUP" --server-pid "$MEMD_SHMDIR_PID" \
			$POOLBENCH_ARGS >"$TMP/out" ||
			die "poolbench (shm_dir) failed (memd log: $OUT_DIR/memd-shmdir.log)"
		sed 's/^poolbench /poolbench_shmdir /' "$TMP/out" | tag "$rep" >>"$RAW"
	fi
	log "rep $rep/$REPS: rawfab"
	# shellcheck disable=SC2086
	run_cmd "$RAWFAB" --sizes "$SIZES" --depths "$DEPTHS" \
		--seconds "$POINT_SECONDS" --warmup "$WARMUP" $RAWFAB_ARGS \
		>"$TMP/out" || die "rawfab failed"
	tag "$rep" <"$TMP/out" >>"$RAW"
	log "rep $rep/$REPS: rawfab --target-process"
	# The target in its own process, as memd is: separates what the
	# process boundary costs from what libpool costs.
	# shellcheck disable=SC2086
	run_cmd "$RAWFAB" --target-process --rw read --sizes "$PROC_SIZES" \
		--depths "$DEPTHS" --seconds "$POINT_SECONDS" \
		--warmup "$WARMUP" $RAWFAB_ARGS >"$TMP/out" ||
		die "rawfab --target-process failed"
	sed 's/^rawfab /rawfab_proc /' "$TMP/out" | tag "$rep" >>"$RAW"
	log "rep $rep/$REPS: memcpy"
	run_cmd "$POOLBENCH" memcpy --sizes "$SIZES" --seconds 0.5 \
		--warmup "$WARMUP" >"$TMP/out" || die "poolbench memcpy failed"
	tag "$rep" <"$TMP/out" >>"$RAW"
	for n in ${IPERF_STREAMS//,/ }; do
		log "rep $rep/$REPS: iperf3, $n stream(s)"
		run_iperf "$rep" "$n"
	done
	if [ $HAVE_REDIS = 1 ]; then
		log "rep $rep/$REPS: redis"
		run_redis "$rep"
	fi
	if [ $HAVE_MEMCACHED = 1 ]; then
		log "rep $rep/$REPS: memcached"
		run_cmd "$MCBENCH" --addr "127.0.0.1:$MEMCACHED_PORT" \
			--sizes "$SIZES" --depths "$DEPTHS" \
			--seconds "$MEMCACHED_SECONDS" --warmup "$WARMUP" \
			--server-pid "$MEMCACHED_PID" >"$TMP/out" ||
			die "mcbench failed (memcached log: $OUT_DIR/memcached.log)"
		tag "$rep" <"$TMP/out" >>"$RAW"
	fi
done

# ---- summary ------------------------------------------------------------
bench_finish
