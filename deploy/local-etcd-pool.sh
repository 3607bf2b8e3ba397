#!/usr/bin/env bash
# Starts a tidepool pool whose registry survives its host, on this host's
# loopback (docs/cluster.md, "The etcd backend"): one etcd (Debian's
# etcd-server), two registry memds on it (registry = etcd, each the
# other's peer: one leads, the other stands by), and N donor memds given
# both registries. Control ports BASE (registry r0), BASE+1 (r1),
# BASE+2... (donors); etcd's client port BASE+2000, its peer port
# BASE+2001. A fresh cluster secret and the demo tenant's secret (mode
# 600) in a new temporary directory, which also holds etcd's data and
# every log. Prints how to point libpool and poolctl at the pool.
#
#   deploy/local-etcd-pool.sh [-n DONORS] [-d SIZE] [-s SLAB] [-p BASE]
#                             [-m MEMD] [-e ETCD] [--detach]
#   deploy/local-etcd-pool.sh --stop DIR
#
#   -n DONORS   donor memds besides the two registries (default 1)
#   -d SIZE     donation of each memd (default 256M)
#   -s SLAB     slab size of the pool (default 16M)
#   -p BASE     first control port (default 7570)
#   -m MEMD     the memd binary (default: $MEMD, else build/release's,
#               build/debug's, then memd on PATH)
#   -e ETCD     the etcd binary (default: $ETCD, else etcd on PATH)
#   --detach    leave it running; stop it with --stop DIR
#
# Try a failover: kill -9 the leader (poolctl names it in its refusals:
# "standby; the leader is ..."; `poolctl -a BASE,BASE+1 status` answers
# from whichever leads) and watch the other take over within etcd_lease
# (3 s). Exit status: 0; 64 bad usage; 69 no etcd binary; 1 when
# something fails to start (what was started is stopped). What it shares
# with local-pool.sh is in local-pool-lib.sh, beside it (sourced).
set -euo pipefail

prog=local-etcd-pool
# shellcheck source=deploy/local-pool-lib.sh
. "$(dirname "$0")/local-pool-lib.sh"

ndonors=1
size=256M
slab=16M
base=7570
memd=${MEMD:-}
etcd=${ETCD:-}
detach=0
demo_quota=256M

usage() {
	sed -n '/^#   deploy/,/^#   --detach/p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 64
}

while [ $# -gt 0 ]; do
	if [ "$1" = -e ]; then
		etcd=${2:?}
		shift 2
		continue
	fi
	lp_opt "logs and etcd data" "$@"
	if [ "$lp_took" = 0 ]; then
		echo "local-etcd-pool: unknown argument '$1'" >&2
		usage
	fi
	shift "$lp_took"
done
lp_check_numbers 32 'base + 2001'
lp_find_memd etcd_endpoints
[ -n "$etcd" ] || etcd=$(command -v etcd || true)
if [ -z "$etcd" ] || [ ! -x "$etcd" ]; then
	echo "local-etcd-pool: no etcd binary: apt-get install etcd-server" \
		"(deploy/install-deps.sh does), or give -e ETCD" >&2
	exit 69
fi

lp_ports_free $(seq "$base" $((base + ndonors + 1))) $((base + 2000)) \
	$((base + 2001))
lp_make_dir tidepool-etcd-pool

# --- etcd --------------------------------------------------------------
eport=$((base + 2000))
pport=$((base + 2001))
"$etcd" --name tidepool --data-dir "$dir/etcd" \
	--listen-client-urls "http://127.0.0.1:$eport" \
	--advertise-client-urls "http://127.0.0.1:$eport" \
	--listen-peer-urls "http://127.0.0.1:$pport" \
	--initial-advertise-peer-urls "http://127.0.0.1:$pport" \
	--initial-cluster "tidepool=http://127.0.0.1:$pport" \
	>"$dir/etcd.log" 2>&1 &
lp_started $!
for _ in $(seq 1 100); do
	lp_port_busy "$eport" && break
	sleep 0.1
done
lp_port_busy "$eport" || {
	echo "local-etcd-pool: etcd did not start; its log:" >&2
	cat "$dir/etcd.log" >&2
	exit 1
}

# --- memds ---------------------------------------------------------------
r0=127.0.0.1:$base
r1=127.0.0.1:$((base + 1))
# NAME INDEX [lines...]: a memd of the pool named NAME
start_memd() {
	lp_start_memd "$1" "$2" "donor_name = $1" "${@:3}"
}
start_memd r0 0 "registry = etcd" "etcd_endpoints = 127.0.0.1:$eport" \
	"registry_peers = $r1"
start_memd r1 1 "registry = etcd" "etcd_endpoints = 127.0.0.1:$eport" \
	"registry_peers = $r0"
for i in $(seq 1 "$ndonors"); do
	start_memd "donor$i" $((i + 1)) "registry = $r0,$r1"
done
started=1

lp_add_demo "$r0,$r1" "$demo_quota"

cat <<EOF
tidepool pool on etcd in $dir
  etcd       127.0.0.1:$eport   (data $dir/etcd, log $dir/etcd.log)
  registry   $r0 and $r1 (one leads; logs r0.log, r1.log)
  donors     $ndonors, $size each, slab $slab

  alias poolctl='$pc'
  poolctl status; poolctl donors

  export LIBPOOL_ADDR=$r0,$r1 LIBPOOL_TENANT=demo
  export LIBPOOL_SECRET_FILE=$dir/tenant-demo.secret
EOF
if [ "$detach" -eq 1 ]; then
	echo "Running; stop it with: $0 --stop $dir"
	exit 0
fi
echo "Ctrl-C stops everything (logs stay in $dir)."
while true; do
	for pid in "${pids[@]}"; do
		[ -n "$pid" ] || continue
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "local-etcd-pool: pid $pid exited (a registry you" \
				"killed?); the rest keeps running until Ctrl-C" >&2
			pids=("${pids[@]/$pid/}")
		fi
	done
	sleep 1
done
