#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_kvbench.sh - the KV tier against recomputing and against redis.
#
# For each of REPS repetitions and each workload (shared, oneshot,
# multiturn), runs kvbench three times on an empty tier:
#   tidepool  a standalone memd on loopback (CAP donated, kv_share 100)
#   redis     a redis-server on loopback (maxmemory CAP, allkeys-lru)
#   memcached a memcached on loopback (-m CAP, -I 2m for the 1 MiB blocks,
#             -t MEMCACHED_THREADS; its own LRU), skipped with a log
#             line where memcached is not installed
#   none      local HBM only
# (memd, redis and memcached are restarted before every run), then prints
# medians per (tier, workload) and the one-shot cost of the tier against
# no tier. Builds nothing.
#
# usage: bench/run_kvbench.sh [BUILD_DIR]   (or BUILD=dir; default
#        build-bench at the repository root)
#        bench/run_kvbench.sh --summarize RAW.txt...
# Knobs (environment): REPS=3 CAP=2560M SLAB=64M LAYERS=1 PROMPTS=60
#   SESSIONS=16 TURNS=4 HBM=5 TPS=10000 WORKLOADS="shared oneshot multiturn"
#   ONESHOT_PROMPTS=10 MEMCACHED_THREADS=2
#   OUT_DIR=<BUILD>/kvbench-results/<time>
#   FABRIC=1: also the tier "tidepool_fabric", the same memd with the
#   client's same-host path off (LIBPOOL_SHM=off: KV over RMA, as before
#   issue 19's KV files), for a before/after in one run; 0: not run
#   STREAMS=2: also the tier "tidepool_striped", the tcp tier with
#   LIBPOOL_KV_STREAMS=STREAMS (a get's transfers striped over that many
#   connections to memd; docs/kv.md); 0 or 1: not run. Where FABRIC=1.
#   NET=1: also "tidepool_net" and "tidepool_net_striped", the same two
#   with memd's provider = net (memd.conf(5)); 0 (default): not run
#   SHM_DIR=<dir>: memd's slabs in that tmpfs directory (memd.conf(5)
#   shm_dir; gets then read 2 MiB pages, puts go over the fabric)
# Where BUILD has bench/poolbench, a local memcpy of 1 MiB (poolbench
# memcpy, 1 s) is measured before and after the runs (MEMCPY lines), for
# issue 29's ratio of the KV get to memcpy.
# TRANSPORT=1 (default where FABRIC=1): per repetition, before its
# workloads, what the transport under the tcp tier carries on this host
# (TRANSPORT lines): one loopback TCP stream (iperf3 -J, 2 s of 1 MiB
# writes, where iperf3 is installed; with STREAMS > 1 also STREAMS
# parallel streams, -P) and raw 1 MiB RMA reads over the
# fabric (poolbench --rw read, depth 16, 1 s, LIBPOOL_SHM=off) against a
# fresh memd; the summary sets the tcp tier and memcached against them.
# Everything listens on 127.0.0.1; servers started here are killed on exit.
set -euo pipefail

# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
bench_python

summarize() {
	bench_summarize_py "$@" <<'EOF'
import fileinput, statistics, sys
from collections import defaultdict

WORKLOADS = ("shared", "oneshot", "multiturn")
# the tidepool tiers (the client's path and memd's provider), then the rest
TIDEPOOL = ("tidepool", "tidepool_fabric", "tidepool_striped",
            "tidepool_net", "tidepool_net_striped")
TIERS = TIDEPOOL + ("redis", "memcached", "none")

rows = defaultdict(list)
memcpy = []
transport = defaultdict(list)
for line in fileinput.input(sys.argv[1:]):
    line = line.strip()
    if line.startswith("#"):
        print(line)
        continue
    if line.startswith("MEMCPY"):
        memcpy.append(float(dict(w.split("=", 1)
                                 for w in line.split()[1:])["MBps"]))
        continue
    if line.startswith("TRANSPORT"):
        kv = dict(w.split("=", 1) for w in line.split()[1:])
        transport[kv["what"]].append(float(kv["MBps"]))
        continue
    if not line.startswith("KVBENCH"):
        continue
    kv = dict(w.split("=", 1) for w in line.split()[1:])
    rows[(kv["workload"], kv["tier"])].append(kv)

def med(w, t, f):
    v = [float(r[f]) for r in rows.get((w, t), []) if f in r]
    return statistics.median(v) if v else float("nan")

def div(a, b):
    return a / b if b else float("nan")

def rng(w, t, f):
    v = [float(r[f]) for r in rows.get((w, t), []) if f in r]
    return (min(v), max(v)) if v else (float("nan"),) * 2

print(f"{'workload':<10} {'tier':<20} {'runs':>4} {'hit':>6} {'local':>6} "
      f"{'tier':>6} {'get MB/s':>9} {'put MB/s':>9} {'GB got':>7} "
      f"{'GB put':>7} {'exists ms':>9} {'TTFT s':>7} {'recompute s':>11} "
      f"{'TTFT/recomp':>11}")
for w in WORKLOADS:
    for t in TIERS:
        if (w, t) not in rows:
            continue
        ttft, rec = med(w, t, "ttft_s"), med(w, t, "ttft_recompute_s")
        print(f"{w:<10} {t:<20} {len(rows[(w, t)]):>4} "
              f"{med(w, t, 'hit'):>6.3f} {med(w, t, 'local_hit'):>6.3f} "
              f"{med(w, t, 'tier_hit'):>6.3f} {med(w, t, 'get_MBps'):>9.0f} "
              f"{med(w, t, 'put_MBps'):>9.0f} "
              f"{med(w, t, 'get_bytes') / 1e9:>7.2f} "
              f"{med(w, t, 'put_bytes') / 1e9:>7.2f} "
              f"{med(w, t, 'exists_ms'):>9.3f} {ttft:>7.3f} {rec:>11.3f} "
              f"{div(ttft, rec):>11.3f}")
for t in ("tidepool", "redis", "memcached"):
    if ("oneshot", t) in rows:
        lo, hi = rng("oneshot", t, "crit_overhead_pct")
        print(f"median oneshot_cost_pct tier={t} "
              f"value={med('oneshot', t, 'crit_overhead_pct'):.3f} "
              f"range={lo:.3f}..{hi:.3f} (exists + starting the put, "
              f"against prefill)")
for w in WORKLOADS:
    for t in TIDEPOOL:
        if (w, t) in rows and (w, "redis") in rows:
            print(f"median get_MBps_vs_redis workload={w} tier={t} "
                  f"value={div(med(w, t, 'get_MBps'), med(w, 'redis', 'get_MBps')):.2f} "
                  f"target=1.5")
        if (w, t) in rows and (w, "memcached") in rows:
            # issue 29: same-host 1.5x memcached, over tcp 1.2x
            print(f"median get_MBps_vs_memcached workload={w} tier={t} "
                  f"value={div(med(w, t, 'get_MBps'), med(w, 'memcached', 'get_MBps')):.2f} "
                  f"target={1.5 if t == 'tidepool' else 1.2}")
        if t == "tidepool" and (w, t) in rows and memcpy:
            print(f"median get_MBps_vs_memcpy workload={w} tier={t} "
                  f"value={div(med(w, t, 'get_MBps'), statistics.median(memcpy)):.2f} "
                  f"memcpy_MBps={statistics.median(memcpy):.0f} target=0.3")
for what in ("tcp_stream", "tcp_streams", "rma_read"):
    if not transport[what]:
        continue
    tm = statistics.median(transport[what])
    print(f"median transport what={what} MBps={tm:.0f} "
          f"runs={len(transport[what])}")
    for w in WORKLOADS:
        for t in TIDEPOOL[1:] + ("memcached",):
            if (w, t) in rows:
                print(f"median get_MBps_vs_{what} workload={w} tier={t} "
                      f"value={div(med(w, t, 'get_MBps'), tm):.2f}")
for w in ("shared", "multiturn"):
    for t in ("tidepool", "redis", "memcached"):
        if (w, t) in rows and (w, "none") in rows:
            print(f"median ttft_vs_hbm_only workload={w} tier={t} "
                  f"value={div(med(w, t, 'ttft_s'), med(w, 'none', 'ttft_s')):.3f}")
    if (w, "tidepool") in rows and (w, "memcached") in rows:
        print(f"median ttft_vs_memcached workload={w} tier=tidepool "
              f"value={div(med(w, 'tidepool', 'ttft_s'), med(w, 'memcached', 'ttft_s')):.3f} "
              f"target=0.9")
EOF
}

if [ "${1:-}" = --summarize ]; then
	shift
	summarize "$@"
	exit 0
fi

BUILD=${1:-${BUILD:-$ROOT/build-bench}}
bench_kvbench_knobs
ONESHOT_PROMPTS=${ONESHOT_PROMPTS:-10}
TPS=${TPS:-10000}
WORKLOADS=${WORKLOADS:-shared oneshot multiturn}
FABRIC=${FABRIC:-1}
TRANSPORT=${TRANSPORT:-$FABRIC}
STREAMS=${STREAMS:-2}
NET=${NET:-0}
SHM_DIR=${SHM_DIR:-}
MEMCACHED_THREADS=${MEMCACHED_THREADS:-2}
OUT_DIR=${OUT_DIR:-$BUILD/kvbench-results/$(date +%Y%m%d-%H%M%S)}

MEMD=$BUILD/memd/memd
KVBENCH=$BUILD/bench/kvbench
for b in "$MEMD" "$KVBENCH"; do
	[ -x "$b" ] || die "$b not found: build first, e.g.
  cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && make -C $BUILD -j2 memd kvbench"
done
command -v redis-server >/dev/null || die "redis-server is needed (the baseline)"
HAVE_MEMCACHED=1
command -v memcached >/dev/null || HAVE_MEMCACHED=0
[[ $MEMCACHED_THREADS =~ ^[1-9][0-9]*$ ]] ||
	die "MEMCACHED_THREADS must be a positive count"

mkdir -p "$OUT_DIR"
RAW=$OUT_DIR/raw.txt
: >"$RAW"
TMP=$(mktemp -d /tmp/kvbench.XXXXXX)
MEMD_PID=
REDIS_PID=
MC_PID=
cleanup() {
	[ -z "$MEMD_PID" ] || kill "$MEMD_PID" 2>/dev/null || true
	[ -z "$REDIS_PID" ] || kill "$REDIS_PID" 2>/dev/null || true
	[ -z "$MC_PID" ] || kill "$MC_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_memd [PROVIDER]: a fresh memd (PROVIDER: memd.conf's provider)
start_memd() {
	rm -f "$TMP/memd.ready"
	"$MEMD" --listen 127.0.0.1:0 --donate "$CAP" --slab-size "$SLAB" \
		--log-level warning --ready-file "$TMP/memd.ready" \
		--set kv_share=100 ${SHM_DIR:+--set "shm_dir=$SHM_DIR"} \
		${1:+--set "provider=$1"} \
		>>"$OUT_DIR/memd.log" 2>&1 &
	MEMD_PID=$!
	for _ in $(seq 600); do
		[ -s "$TMP/memd.ready" ] && break
		kill -0 "$MEMD_PID" 2>/dev/null || die "memd exited (log: $OUT_DIR/memd.log)"
		sleep 0.1
	done
	[ -s "$TMP/memd.ready" ] || die "memd not ready (log: $OUT_DIR/memd.log)"
	ADDR=$(head -n1 "$TMP/memd.ready")
}

stop_memd() {
	kill "$MEMD_PID" 2>/dev/null || true
	wait "$MEMD_PID" 2>/dev/null || true
	MEMD_PID=
}

# A fresh memcached, ready for commands (memcached refuses to run as root
# without -u). Returns 1 when it does not come up.
start_memcached() {
	local user=()
	[ "$(id -u)" != 0 ] || user=(-u root)
	MC_PORT=$(free_port)
	memcached "${user[@]}" -l 127.0.0.1 -p "$MC_PORT" -U 0 \
		-m $((redis_cap >> 20)) -I 2m -t "$MEMCACHED_THREADS" \
		>>"$OUT_DIR/memcached.log" 2>&1 &
	MC_PID=$!
	for _ in $(seq 100); do
		python3 -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.sendall(b"version\r\n")
sys.exit(0 if s.recv(64).startswith(b"VERSION") else 1)' "$MC_PORT" \
			2>/dev/null && return 0
		kill -0 "$MC_PID" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}

stop_memcached() {
	kill "$MC_PID" 2>/dev/null || true
	wait "$MC_PID" 2>/dev/null || true
	MC_PID=
}

REDIS_PORT=$(free_port)
redis_cap=$(python3 -c "
s = '$CAP'; m = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
print(int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s))")
[ $HAVE_MEMCACHED = 1 ] || log "memcached not installed; skipping the memcached tier"
{
	echo "# run_kvbench $(date -u +%FT%TZ) git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# host cpus=$(nproc) kernel=$(uname -r) redis=$(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
	echo "# loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
	echo "# fabric=$FABRIC shm_dir=${SHM_DIR:-none} shmem_enabled=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null)"
	echo "# memcached=$(memcached -V 2>/dev/null | tr ' ' _ || echo none) memcached_threads=$MEMCACHED_THREADS"
	echo "# reps=$REPS cap=$CAP slab=$SLAB layers=$LAYERS prompts=$PROMPTS oneshot_prompts=$ONESHOT_PROMPTS sessions=$SESSIONS turns=$TURNS hbm=$HBM tps=$TPS"
} >>"$RAW"

# memcpy_line: one MEMCPY line (1 MiB local copies), where poolbench is built
memcpy_line() {
	[ -x "$BUILD/bench/poolbench" ] || return 0
	"$BUILD/bench/poolbench" memcpy --sizes 1M --seconds 1 --rw read |
		grep -o 'MBps=[0-9.]*' | head -n1 | sed "s/^/MEMCPY when=$1 /" |
		tee -a "$RAW"
}
memcpy_line start

# transport_lines: TRANSPORT lines (see the top), where the tools exist
transport_lines() {
	[ "$TRANSPORT" = 1 ] || return 0
	if command -v iperf3 >/dev/null; then
		local port
		port=$(free_port)
		iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
		local ipid=$!
		sleep 0.3
		iperf3 -J -c 127.0.0.1 -p "$port" -t 2 -l 1M 2>/dev/null |
			python3 -c 'import json, sys
d = json.load(sys.stdin)
print("TRANSPORT what=tcp_stream streams=1 MBps=%.1f"
      % (d["end"]["sum_received"]["bits_per_second"] / 8e6))' |
			tee -a "$RAW" || log "iperf3 failed; no tcp_stream line"
		kill "$ipid" 2>/dev/null || true
		wait "$ipid" 2>/dev/null || true
		if [ "$STREAMS" -gt 1 ]; then
			port=$(free_port)
			iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
			ipid=$!
			sleep 0.3
			iperf3 -J -c 127.0.0.1 -p "$port" -t 2 -l 1M \
				-P "$STREAMS" 2>/dev/null |
				python3 -c 'import json, sys
d = json.load(sys.stdin)
print("TRANSPORT what=tcp_streams streams=%s MBps=%.1f"
      % (sys.argv[1], d["end"]["sum_received"]["bits_per_second"] / 8e6))' \
					"$STREAMS" | tee -a "$RAW" ||
				log "iperf3 -P failed; no tcp_streams line"
			kill "$ipid" 2>/dev/null || true
			wait "$ipid" 2>/dev/null || true
		fi
	fi
	if [ -x "$BUILD/bench/poolbench" ]; then
		start_memd
		LIBPOOL_SHM=off "$BUILD/bench/poolbench" --addr "$ADDR" \
			--sizes 1M --depths 16 --rw read --seconds 1 |
			grep -o 'MBps=[0-9.]*' | head -n1 |
			sed 's/^/TRANSPORT what=rma_read size=1M depth=16 /' |
			tee -a "$RAW"
		stop_memd
	fi
}

for rep in $(seq "$REPS"); do
	transport_lines
	for w in $WORKLOADS; do
		n=$PROMPTS
		[ "$w" = oneshot ] && n=$ONESHOT_PROMPTS
		args=(--workload "$w" --layers "$LAYERS" --prompts "$n"
			--sessions "$SESSIONS" --turns "$TURNS"
			--hbm-prefixes "$HBM" --tps "$TPS" --seed "$rep")

		log "rep $rep/$REPS $w: tidepool"
		start_memd
		"$KVBENCH" --tier tidepool --addr "$ADDR" "${args[@]}" | tee -a "$RAW"
		stop_memd
		if [ "$FABRIC" = 1 ]; then
			log "rep $rep/$REPS $w: tidepool over the fabric (LIBPOOL_SHM=off)"
			start_memd
			LIBPOOL_SHM=off "$KVBENCH" --tier tidepool --addr "$ADDR" \
				"${args[@]}" | sed 's/ tier=tidepool / tier=tidepool_fabric /' |
				tee -a "$RAW"
			stop_memd
			# the same, striped over STREAMS connections; and (NET=1)
			# both over memd's provider = net
			variants=()
			[ "$STREAMS" -le 1 ] || variants+=("tidepool_striped::$STREAMS")
			[ "$NET" != 1 ] || variants+=("tidepool_net:net:1")
			[ "$NET" != 1 ] || [ "$STREAMS" -le 1 ] ||
				variants+=("tidepool_net_striped:net:$STREAMS")
			for v in "${variants[@]}"; do
				IFS=: read -r tier prov nst <<<"$v"
				log "rep $rep/$REPS $w: $tier (LIBPOOL_SHM=off LIBPOOL_KV_STREAMS=$nst provider=${prov:-tcp})"
				start_memd "$prov"
				LIBPOOL_SHM=off LIBPOOL_KV_STREAMS=$nst "$KVBENCH" \
					--tier tidepool --addr "$ADDR" "${args[@]}" |
					sed "s/ tier=tidepool / tier=$tier /" | tee -a "$RAW"
				stop_memd
			done
		fi

		log "rep $rep/$REPS $w: redis"
		redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
			--appendonly no --maxmemory "$redis_cap" \
			--maxmemory-policy allkeys-lru --loglevel warning \
			>>"$OUT_DIR/redis.log" 2>&1 &
		REDIS_PID=$!
		for _ in $(seq 100); do
			redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
			sleep 0.1
		done
		"$KVBENCH" --tier redis --redis "127.0.0.1:$REDIS_PORT" "${args[@]}" |
			tee -a "$RAW"
		kill "$REDIS_PID"
		wait "$REDIS_PID" 2>/dev/null || true
		REDIS_PID=

		if [ $HAVE_MEMCACHED = 1 ]; then
			log "rep $rep/$REPS $w: memcached"
			if start_memcached; then
				"$KVBENCH" --tier memcached \
					--memcached "127.0.0.1:$MC_PORT" "${args[@]}" |
					tee -a "$RAW"
			else
				log "memcached did not come up; skipping it (log: $OUT_DIR/memcached.log)"
			fi
			stop_memcached
		fi

		log "rep $rep/$REPS $w: none"
		"$KVBENCH" --tier none "${args[@]}" | tee -a "$RAW"
	done
done
memcpy_line end
echo "# loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" >>"$RAW"
summarize "$RAW" | tee "$OUT_DIR/summary.txt"
