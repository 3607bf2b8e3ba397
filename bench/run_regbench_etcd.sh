#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_regbench_etcd.sh - the registry's two backends side by side
# (issue 15, docs/bench/registry.md "Backends"): in each of REPS rounds,
# for each backend
#   json    registry = yes, state in registry.json
#   etcd1   registry = etcd on a 1-member etcd
#   etcd3   registry = etcd on a 3-member etcd
# a registry memd (also its own donor) on loopback, a tenant added with
# poolctl, then regbench place (PLACE alone) and regbench alloc (PLACE +
# LEASE_GRANT + RELEASE) at THREADS client threads; medians of ops/s, p50
# and p99 per point. Then the failover: a 1-member etcd, two registries
# (each the other's peer) and a donor; regfailover allocates and frees
# through the list of both while the leading registry is SIGKILLed KILLS
# times (restarted as a standby each time); the gaps between successful
# allocations are the failover times (p50, max).
#
# usage: bench/run_regbench_etcd.sh [BUILD_DIR]   (default build/release)
# Knobs: REPS=3 SECONDS_PER_POINT=2 THREADS=1,4,16 KILLS=20 LEASE=3s
#        ETCD=etcd OUT_DIR=<BUILD>/regbench-etcd-results/<time>
#        KEEP=1 (keep the scratch directory: logs, etcd data)
# Everything listens on 127.0.0.1 (ports picked free); every process
# started here is killed on exit. Builds nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${BUILD:-$ROOT/build/release}}
REPS=${REPS:-3}
SECONDS_PER_POINT=${SECONDS_PER_POINT:-2}
THREADS=${THREADS:-1,4,16}
KILLS=${KILLS:-20}
LEASE=${LEASE:-3s}
ETCD=${ETCD:-$(command -v etcd || true)}
OUT_DIR=${OUT_DIR:-$BUILD/regbench-etcd-results/$(date +%Y%m%d-%H%M%S)}
MEMD=$BUILD/memd/memd
POOLCTL=$BUILD/poolctl/poolctl
REGBENCH=$BUILD/bench/regbench
REGFAILOVER=$BUILD/bench/regfailover

die() {
	echo "run_regbench_etcd: $*" >&2
	exit 1
}
for b in "$MEMD" "$POOLCTL" "$REGBENCH" "$REGFAILOVER"; do
	[ -x "$b" ] || die "$b is missing: build $BUILD first"
done
[ -n "$ETCD" ] && [ -x "$ETCD" ] || die "no etcd binary (apt-get install etcd-server)"
mkdir -p "$OUT_DIR"
raw=$OUT_DIR/raw.txt
: >"$raw"
tmp=$(mktemp -d /tmp/regbench-etcd.XXXXXX)
chmod 700 "$tmp"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
secret() {
	od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$1"
	chmod 600 "$1"
}
secret "$tmp/cluster.secret"
secret "$tmp/t.secret"

# start_etcd TAG N: N members; sets ENDPOINTS
start_etcd() {
	local tag=$1 n=$2 i initial="" cp pp
	local -a cports=() pports=()
	ENDPOINTS=""
	for i in $(seq 0 $((n - 1))); do
		cports+=("$(free_port)")
		pports+=("$(free_port)")
		initial+="${initial:+,}$tag$i=http://127.0.0.1:${pports[$i]}"
		ENDPOINTS+="${ENDPOINTS:+,}127.0.0.1:${cports[$i]}"
	done
	for i in $(seq 0 $((n - 1))); do
		cp=${cports[$i]}
		pp=${pports[$i]}
		"$ETCD" --name "$tag$i" --data-dir "$tmp/etcd-$tag-$i" \
			--listen-client-urls "http://127.0.0.1:$cp" \
			--advertise-client-urls "http://127.0.0.1:$cp" \
			--listen-peer-urls "http://127.0.0.1:$pp" \
			--initial-advertise-peer-urls "http://127.0.0.1:$pp" \
			--initial-cluster "$initial" \
			--initial-cluster-token "$tag-$$" \
			>"$tmp/etcd-$tag-$i.log" 2>&1 &
		pids+=($!)
	done
	for _ in $(seq 1 100); do
		curl -s -m 1 -X POST -d '{"key":"eA=="}' \
			"http://${ENDPOINTS%%,*}/v3/kv/range" | grep -q header && return 0
		sleep 0.2
	done
	die "etcd $tag did not come up (see $tmp/etcd-$tag-*.log)"
}

# start_memd NAME PORT KEY=VALUE...: sets PID
start_memd() {
	local name=$1 port=$2 a=() kv
	shift 2
	for kv in "$@"; do a+=(--set "$kv"); done
	rm -f "$tmp/$name.ready"
	"$MEMD" --listen "127.0.0.1:$port" --donate 1280M --slab-size 1M \
		--set "cluster_secret_file=$tmp/cluster.secret" \
		--set "donor_name=$name" --set log_level=warning "${a[@]}" \
		--ready-file "$tmp/$name.ready" >>"$tmp/$name.log" 2>&1 &
	PID=$!
	pids+=("$PID")
	for _ in $(seq 1 300); do
		[ -s "$tmp/$name.ready" ] && return 0
		kill -0 "$PID" 2>/dev/null || die "$name died (see $tmp/$name.log)"
		sleep 0.1
	done
	die "$name not ready"
}

add_tenant() { # ADDRS
	for _ in $(seq 1 100); do
		"$POOLCTL" -a "$1" -s "$tmp/cluster.secret" tenant add t --quota 1T \
			--secret-file "$tmp/t.secret" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "could not add the tenant at $1"
}

wait_free() { # ADDRS: until a donor has reported (placement needs that)
	for _ in $(seq 1 100); do
		"$POOLCTL" -a "$1" -s "$tmp/cluster.secret" --json donors 2>/dev/null |
			grep -q '"reports": *[1-9]' && return 0
		sleep 0.1
	done
	die "no donor reported at $1"
}

stop_all() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=()
}

echo "# run_regbench_etcd host=$(hostname) cpus=$(nproc) reps=$REPS seconds=$SECONDS_PER_POINT threads=$THREADS etcd=$("$ETCD" --version | head -1)" | tee -a "$raw"
for rep in $(seq 1 "$REPS"); do
	for be in json etcd1 etcd3; do
		port=$(free_port)
		case $be in
		json)
			mkdir -p "$tmp/state-$rep"
			start_memd "r-$be-$rep" "$port" registry=yes \
				"state_dir=$tmp/state-$rep"
			;;
		etcd1 | etcd3)
			start_etcd "$be$rep" "${be#etcd}"
			start_memd "r-$be-$rep" "$port" registry=etcd \
				"etcd_endpoints=$ENDPOINTS" \
				"etcd_prefix=/bench$rep$be"
			;;
		esac
		add_tenant "127.0.0.1:$port"
		wait_free "127.0.0.1:$port"
		# alloc first: place leaves a phantom donor behind for a while
		for op in alloc place; do
			if ! "$REGBENCH" "$op" --addr "127.0.0.1:$port" \
				--tenant t --secret "$tmp/t.secret" \
				--cluster-secret "$tmp/cluster.secret" \
				--threads "$THREADS" --seconds "$SECONDS_PER_POINT" \
				--memd-pid "$PID" >"$tmp/out" 2>"$tmp/err"; then
				cat "$tmp/err" >&2
				die "regbench $op failed on $be (logs in $tmp)"
			fi
			sed "s/^/backend=$be rep=$rep /" "$tmp/out" | tee -a "$raw"
		done
		stop_all
	done
done

# --- failover ---------------------------------------------------------
start_etcd fo 1
p0=$(free_port)
p1=$(free_port)
rconf() { # I: the keys of registry I
	local me=$1 peer
	[ "$me" = 0 ] && peer=$p1 || peer=$p0
	echo registry=etcd "etcd_endpoints=$ENDPOINTS" "etcd_lease=$LEASE" \
		"registry_peers=127.0.0.1:$peer" report_interval=200ms
}
# shellcheck disable=SC2046
start_memd fo-r0 "$p0" $(rconf 0)
rpid[0]=$PID
# shellcheck disable=SC2046
start_memd fo-r1 "$p1" $(rconf 1)
rpid[1]=$PID
start_memd fo-d "$(free_port)" "registry=127.0.0.1:$p0,127.0.0.1:$p1" \
	report_interval=200ms
list=127.0.0.1:$p0,127.0.0.1:$p1
add_tenant "$list"
wait_free "$list"
"$REGFAILOVER" --addr "$list" --tenant t --secret "$tmp/t.secret" \
	--len 1048576 --gap-ms 300 >"$tmp/failover.out" 2>"$tmp/failover.err" &
fpid=$!
pids+=("$fpid")
mono_ms() { python3 -c 'import time; print(int(time.monotonic() * 1000))'; }
: >"$tmp/kills"
leader() {
	local i
	for i in 0 1; do
		if [ "$i" = 0 ]; then p=$p0; else p=$p1; fi
		"$POOLCTL" -a "127.0.0.1:$p" -s "$tmp/cluster.secret" status \
			>/dev/null 2>&1 && { echo "$i"; return 0; }
	done
	echo -1
}
for k in $(seq 1 "$KILLS"); do
	# the client allocates again after the previous kill, then 2 s more
	for _ in $(seq 1 300); do
		[ "$(grep -c '^gap_ms=' "$tmp/failover.out" || true)" -ge $((k - 1)) ] && break
		sleep 0.1
	done
	sleep 2
	l=-1
	for _ in $(seq 1 100); do
		l=$(leader)
		[ "$l" != -1 ] && break
		sleep 0.1
	done
	[ "$l" != -1 ] || die "no leader before kill $k"
	mono_ms >>"$tmp/kills"
	kill -9 "${rpid[$l]}"
	wait "${rpid[$l]}" 2>/dev/null || true
	sleep 0.5
	if [ "$l" = 0 ]; then p=$p0; else p=$p1; fi
	# shellcheck disable=SC2046
	start_memd "fo-r$l" "$p" $(rconf "$l")
	rpid[$l]=$PID
done
sleep 3
kill -INT "$fpid"
wait "$fpid" 2>/dev/null || true
sed "s/^/backend=etcd1 lease=$LEASE kills=$KILLS /" "$tmp/failover.out" >>"$raw"
# each kill's failover: from the kill to the first allocation after it
python3 - "$tmp/kills" "$tmp/failover.out" <<'EOF' | tee -a "$raw"
import re, statistics, sys
kills = [int(x) for x in open(sys.argv[1]).read().split()]
ends = [int(m) for m in re.findall(r"end_ms=(\d+)", open(sys.argv[2]).read())]
fo = []
for k in kills:
    after = [e for e in ends if e > k]
    if after:
        fo.append(min(after) - k)
if fo:
    print(f"failover kills={len(kills)} measured={len(fo)} "
          f"p50_ms={statistics.median(fo):.0f} max_ms={max(fo)} "
          f"min_ms={min(fo)} all_ms={','.join(map(str, fo))}")
EOF

python3 - "$raw" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("#") or "regbench" not in line:
        continue
    kv = dict(re.findall(r"(\w+)=([^\s]+)", line))
    if "op" not in kv or "threads" not in kv:
        continue
    rows.setdefault((kv["backend"], kv["op"], int(kv["threads"])), []).append(kv)
def med(v, f):
    x = [float(r[f]) for r in v if f in r]
    return statistics.median(x) if x else float("nan")
print(f"{'backend':<7} {'op':<6} {'thr':>3} | {'ops/s':>8} {'p50 us':>8} {'p99 us':>8} {'reps':>4}")
for (be, op, t), v in sorted(rows.items(), key=lambda k: (k[0][1], k[0][2], k[0][0])):
    print(f"{be:<7} {op:<6} {t:>3} | {med(v,'ops_s'):>8.0f} {med(v,'p50_us'):>8.1f} {med(v,'p99_us'):>8.1f} {len(v):>4}")
EOF
grep '^backend=etcd1 lease=.*regfailover' "$raw" || true
grep '^failover ' "$raw" || true
echo "raw results: $raw"
