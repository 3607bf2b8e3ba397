#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_regbench.sh - the cluster control plane with its baselines.
#
# Starts a registry memd on loopback (it is also its own donor, "r0"),
# adds a tenant with poolctl, starts a redis-server on loopback, then runs
# REPS repetitions of
#   regbench alloc   PLACE + LEASE_GRANT + RELEASE of 1 slab (alloc+free)
#   regbench place   PLACE alone (tickets go to a phantom donor, unredeemed)
#   regbench status  STATUS round trips: the control plane's empty RPC
#   regbench redis   INCR+DECR pairs on one redis key (a tiny C client)
#   redis-benchmark  -t incr, as a cross-check of that client
# each at THREADS client threads, then HB_REPS repetitions of
#   regbench heartbeat  HB_SESSIONS tenant sessions on the donor, one lease
#                       each, HEARTBEAT2 every ttl/3, for HB_SECONDS
# and prints medians, ratios, and machine-readable "median ..." lines.
# Builds nothing.
#
# usage: bench/run_regbench.sh [BUILD_DIR]     (or BUILD=dir; default
#        build-bench at the repository root)
#        bench/run_regbench.sh --summarize RAW.txt...   medians over runs
# Knobs (environment):
#   REPS=5 SECONDS_PER_POINT=2 WARMUP=0.2 THREADS=1,4,16
#   HB_REPS=3 HB_SECONDS=30 HB_SESSIONS=0,100,300,1000 HB_THREADS=4
#   SLAB=1M DONATE=1280M (1280 slabs: 1000 sessions hold one each)
#   MEMD_ARGS (extra memd flags, e.g. "--set quiesce=0")
#   REDIS_N=50000 (requests per redis-benchmark test)
#   OUT_DIR=<BUILD>/regbench-results/<time>
# Everything listens on 127.0.0.1 only; every server started here is
# killed on exit. With the defaults it takes about 10 minutes.
set -euo pipefail

# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
BUILD=${1:-${BUILD:-$ROOT/build-bench}}
REPS=${REPS:-5}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-2}
WARMUP=${WARMUP:-0.2}
THREADS=${THREADS:-1,4,16}
HB_REPS=${HB_REPS:-3}
HB_SECONDS=${HB_SECONDS:-30}
HB_SESSIONS=${HB_SESSIONS:-0,100,300,1000}
HB_THREADS=${HB_THREADS:-4}
SLAB=${SLAB:-1M}
DONATE=${DONATE:-1280M}
MEMD_ARGS=${MEMD_ARGS:-}
REDIS_N=${REDIS_N:-50000}
OUT_DIR=${OUT_DIR:-$BUILD/regbench-results/$(date +%Y%m%d-%H%M%S)}

bench_python

summarize() {
	bench_summarize_py "$@" <<'EOF'
import statistics, sys
from benchutil import load, values, median, fmt

# a point: (bench, op, threads or sessions)
rows, comments = load(sys.argv[1:], lambda b, kv: (
    b, kv.get("op"), int(kv.get("sessions", kv.get("threads", 1)))))

def vals(bench, op, n, field):
    return values(rows, (bench, op, n), field)

def med(bench, op, n, field="ops_s"):
    return median(rows, (bench, op, n), field)

def rng(bench, op, n, field="ops_s"):
    v = vals(bench, op, n, field)
    return f"{min(v):,.0f}-{max(v):,.0f}" if v else "n/a"

for c in comments:
    print(c)
print()
threads = sorted({k[2] for k in rows if k[0] == "regbench" and k[1] == "cycle"})
nreps = max((len(v) for k, v in rows.items() if k[1] == "cycle"), default=0)
print(f"ALLOCATION: medians of {nreps} repetitions (ops/s; latency us; "
      f"memd CPU us per op)")
print(f"{'op':<10} {'thr':>3} | {'ops/s':>8} {'range':>15} {'p50':>7} "
      f"{'p99':>8} {'memd_us':>8} {'retries':>7}")
for op in ("cycle", "place", "status"):
    for t in threads:
        print(f"{op:<10} {t:>3} | {fmt(med('regbench', op, t)):>8} "
              f"{rng('regbench', op, t):>15} "
              f"{fmt(med('regbench', op, t, 'p50_us'), 1):>7} "
              f"{fmt(med('regbench', op, t, 'p99_us'), 1):>8} "
              f"{fmt(med('regbench', op, t, 'memd_cpu_us'), 1):>8} "
              f"{fmt(med('regbench', op, t, 'retries')):>7}")
for t in threads:
    print(f"{'redis':<10} {t:>3} | {fmt(med('regbench', 'incr_decr', t)):>8} "
          f"{rng('regbench', 'incr_decr', t):>15} "
          f"{fmt(med('regbench', 'incr_decr', t, 'p50_us'), 1):>7} "
          f"{fmt(med('regbench', 'incr_decr', t, 'p99_us'), 1):>8}   (INCR+DECR pairs)")
for t in threads:
    print(f"{'redis-b':<10} {t:>3} | {fmt(med('redisbench', 'incr', t)):>8} "
          f"{rng('redisbench', 'incr', t):>15} "
          f"{fmt(med('redisbench', 'incr', t, 'p50_us'), 1):>7} "
          f"{fmt(med('redisbench', 'incr', t, 'p99_us'), 1):>8}   "
          f"(redis-benchmark -t incr -c {t}: single INCRs)")
print()
print("CYCLE STEPS: medians of per-run p50 / p99 (us)")
for t in threads:
    print(f"  threads={t:>2}: " + "  ".join(
        f"{s} {fmt(med('regbench', 'cycle', t, s + '_p50_us'), 1)}"
        f"/{fmt(med('regbench', 'cycle', t, s + '_p99_us'), 1)}"
        for s in ("place", "grant", "release")))
print()
sess = sorted({k[2] for k in rows if k[1] == "heartbeat"})
hreps = max((len(v) for k, v in rows.items() if k[1] == "heartbeat"), default=0)
rss0 = [float(w.split("=", 1)[1]) for c in comments for w in c.split()
        if w.startswith("memd_rss_start_kib=") and w[19:].isdigit()]
rss0 = statistics.median(rss0) if rss0 else None
print(f"HEARTBEAT: medians of {hreps} repetitions")
print(f"{'sessions':>8} | {'hb/s':>6} {'memd CPU %':>10} {'range':>11} "
      f"{'rtt p50':>8} {'rtt p99':>8} {'late':>5} {'RSS MiB':>8} "
      f"{'+start MiB':>10} {'setup/s':>8}")
for n in sess:
    cpu = vals("regbench", "heartbeat", n, "memd_cpu_pct")
    rss = med("regbench", "heartbeat", n, "memd_rss_kib")
    print(f"{n:>8} | {fmt(med('regbench', 'heartbeat', n, 'hb_s'), 0):>6} "
          f"{fmt(med('regbench', 'heartbeat', n, 'memd_cpu_pct'), 2):>10} "
          f"{(f'{min(cpu):.2f}-{max(cpu):.2f}' if cpu else 'n/a'):>11} "
          f"{fmt(med('regbench', 'heartbeat', n, 'rtt_p50_us'), 1):>8} "
          f"{fmt(med('regbench', 'heartbeat', n, 'rtt_p99_us'), 1):>8} "
          f"{fmt(med('regbench', 'heartbeat', n, 'late')):>5} "
          f"{fmt(rss / 1024 if rss else None, 1):>8} "
          f"{fmt((rss - rss0) / 1024 if rss and rss0 else None, 1):>10} "
          f"{fmt(med('regbench', 'heartbeat', n, 'setup_sessions_s')):>8}")
print()
for (bench, op, n), v in sorted(rows.items()):
    fields = sorted({f for r in v for f in r} - {"op", "threads", "sessions",
                                                 "rep", "api", "size", "depth"})
    parts = [f"median bench={bench} op={op} n={n} reps={len(v)}"]
    for f in fields:
        m = med(bench, op, n, f)
        if m is not None:
            parts.append(f"{f}={m:.2f}")
    print(" ".join(parts))
print()

def ratio(name, num, den, note=""):
    if num is None or den is None or den == 0:
        print(f"ratio name={name} value=n/a {note}".rstrip())
        return
    print(f"ratio name={name} value={num / den:.3f} num={num:.1f} "
          f"den={den:.1f} {note}".rstrip())

print("RATIOS (medians)")
for t in threads:
    ratio(f"cycle_vs_status_t{t}", med("regbench", "cycle", t),
          med("regbench", "status", t), "cycles per empty RPC")
    ratio(f"cycle_vs_redis_pairs_t{t}", med("regbench", "cycle", t),
          med("regbench", "incr_decr", t), "alloc+free per INCR+DECR")
    ratio(f"place_vs_status_t{t}", med("regbench", "place", t),
          med("regbench", "status", t))
    ratio(f"place_vs_redis_incr_t{t}", med("regbench", "place", t),
          med("redisbench", "incr", t), "PLACE per redis INCR")
    ratio(f"status_vs_redis_incr_t{t}", med("regbench", "status", t),
          med("redisbench", "incr", t), "empty RPC per redis INCR")
if sess:
    top = max(sess)
    ratio(f"hb_cpu_{top}_vs_idle", med("regbench", "heartbeat", top, "memd_cpu_pct"),
          med("regbench", "heartbeat", 0, "memd_cpu_pct"))
EOF
}
bench_cli 4 31 "$@"

MEMD=$BUILD/memd/memd
POOLCTL=$BUILD/poolctl/poolctl
REGBENCH=$BUILD/bench/regbench
bench_need "$MEMD" "$POOLCTL" "$REGBENCH"
for v in REPS HB_REPS HB_THREADS REDIS_N; do
	[[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive count"
done

bench_out regbench

# 1,000 sessions need 1,000+ descriptors in memd and in regbench.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge 4096 ] ||
	die "RLIMIT_NOFILE is $(ulimit -n): 1,000 sessions need more (ulimit -Hn)"

START_TIME=$(date +%s)
{
	echo "# run_regbench $(date -u +%FT%TZ) git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	# shellcheck source=/dev/null
	echo "# host cpus=$(nproc) kernel=$(uname -r) os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" | tr ' ' _) redis=$(redis-server --version 2>/dev/null | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
	echo "# loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
	echo "# reps=$REPS seconds=$SECONDS_PER_POINT warmup=$WARMUP threads=$THREADS hb_reps=$HB_REPS hb_seconds=$HB_SECONDS hb_sessions=$HB_SESSIONS hb_threads=$HB_THREADS slab=$SLAB donate=$DONATE memd_args=${MEMD_ARGS// /_}"
} >>"$RAW"

# ---- registry memd --------------------------------------------------------
mkdir -m 700 "$TMP/state"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/cluster.secret"
chmod 600 "$TMP/cluster.secret"
log "starting a registry memd on 127.0.0.1 ($DONATE donated, $SLAB slabs)"
# shellcheck disable=SC2086
bench_start_memd "$OUT_DIR/memd.log" --donate "$DONATE" --slab-size "$SLAB" \
	--set registry=yes --set "cluster_secret_file=$TMP/cluster.secret" \
	--set "state_dir=$TMP/state" --set donor_name=r0 \
	--set max_clients=4096 $MEMD_ARGS
ADDR=$MEMD_ADDR
ctl() { "$POOLCTL" -a "$ADDR" -s "$TMP/cluster.secret" "$@"; }
for _ in $(seq 100); do
	ctl donors 2>/dev/null | grep -q ' r0 .* up ' && break
	sleep 0.1
done
ctl donors | grep -q ' r0 .* up ' || die "r0 did not join its registry"
ctl tenant add bench --quota 1P --secret-out "$TMP/bench.secret" >/dev/null ||
	die "poolctl tenant add failed"
echo "# memd_rss_start_kib=$(awk '/^VmRSS:/ {print $2}' "/proc/$MEMD_PID/status")" >>"$RAW"
log "registry memd ready at $ADDR (pid $MEMD_PID)"

# Until every slab is free again (leases of the last point released and
# zeroed, reservations dropped), at most 60 s.
wait_free() {
	for _ in $(seq 600); do
		ctl --json status | "$PY" -c 'import json, sys
j = json.load(sys.stdin)
sys.exit(0 if j["free_bytes"] == j["capacity_bytes"] else 1)' && return 0
		sleep 0.1
	done
	log "the pool did not become all free in 60 s; going on"
}

# ---- redis --------------------------------------------------------------
bench_start_redis redis-server

# redis-benchmark --csv: "INCR","rps","avg_ms","min_ms","p50_ms","p95_ms",
# "p99_ms","max_ms" -> our line format
redis_lines() { # clients csvfile rep
	"$PY" - "$1" "$2" "$3" <<'EOF'
import csv, sys
for row in csv.reader(open(sys.argv[2])):
    if not row or row[0] != "INCR":
        continue
    print("redisbench op=incr threads=%s ops_s=%.0f p50_us=%.1f p99_us=%.1f "
          "rep=%s" % (sys.argv[1], float(row[1]), float(row[4]) * 1e3,
                      float(row[6]) * 1e3, sys.argv[3]))
EOF
}

common=(--addr "$ADDR" --tenant bench --secret "$TMP/bench.secret"
	--memd-pid "$MEMD_PID")
point=(--threads "$THREADS" --seconds "$SECONDS_PER_POINT" --warmup "$WARMUP")
for rep in $(seq "$REPS"); do
	log "rep $rep/$REPS: alloc (PLACE + LEASE_GRANT + RELEASE)"
	wait_free
	run_cmd "$REGBENCH" alloc "${common[@]}" "${point[@]}" >"$TMP/out" ||
		die "regbench alloc failed (memd log: $OUT_DIR/memd.log)"
	tag "$rep" <"$TMP/out" >>"$RAW"
	log "rep $rep/$REPS: PLACE alone"
	run_cmd "$REGBENCH" place "${common[@]}" "${point[@]}" \
		--cluster-secret "$TMP/cluster.secret" >"$TMP/out" ||
		die "regbench place failed (memd log: $OUT_DIR/memd.log)"
	tag "$rep" <"$TMP/out" >>"$RAW"
	log "rep $rep/$REPS: STATUS"
	run_cmd "$REGBENCH" status "${common[@]}" "${point[@]}" >"$TMP/out" ||
		die "regbench status failed"
	tag "$rep" <"$TMP/out" >>"$RAW"
	if [ $HAVE_REDIS = 1 ]; then
		log "rep $rep/$REPS: redis INCR+DECR"
		run_cmd "$REGBENCH" redis --redis "127.0.0.1:$REDIS_PORT" \
			"${point[@]}" >"$TMP/out" || die "regbench redis failed"
		tag "$rep" <"$TMP/out" >>"$RAW"
		if command -v redis-benchmark >/dev/null; then
			for t in ${THREADS//,/ }; do
				if run_cmd redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" \
					-t incr -c "$t" -P 1 -n "$REDIS_N" --csv \
					>"$TMP/redis.csv" 2>>"$OUT_DIR/redis-benchmark.err"; then
					redis_lines "$t" "$TMP/redis.csv" "$rep" >>"$RAW"
				else
					log "redis-benchmark -c $t failed"
				fi
			done
		fi
	fi
done

for rep in $(seq "$HB_REPS"); do
	for n in ${HB_SESSIONS//,/ }; do
		log "heartbeat rep $rep/$HB_REPS: $n sessions, ${HB_SECONDS}s"
		wait_free
		run_cmd "$REGBENCH" heartbeat "${common[@]}" --sessions "$n" \
			--hb-threads "$HB_THREADS" --seconds "$HB_SECONDS" \
			>"$TMP/out" ||
			die "regbench heartbeat failed (memd log: $OUT_DIR/memd.log)"
		tag "$rep" <"$TMP/out" >>"$RAW"
	done
done
bench_finish
