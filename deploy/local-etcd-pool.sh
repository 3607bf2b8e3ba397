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
# something fails to start (what was started is stopped).
set -euo pipefail

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

stop_dir() {
	local dir=$1 pid
	[ -f "$dir/pids" ] || {
		echo "local-etcd-pool: $dir/pids not found" >&2
		return 1
	}
	# donors, then the registries, etcd (first line) last
	for pid in $(tac "$dir/pids"); do
		kill -TERM "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	done
	echo "local-etcd-pool: stopped $dir (logs and etcd data kept there)"
}

while [ $# -gt 0 ]; do
	case "$1" in
	-n) ndonors=${2:?}; shift 2 ;;
	-d) size=${2:?}; shift 2 ;;
	-s) slab=${2:?}; shift 2 ;;
	-p) base=${2:?}; shift 2 ;;
	-m) memd=${2:?}; shift 2 ;;
	-e) etcd=${2:?}; shift 2 ;;
	--detach) detach=1; shift ;;
	--stop)
		stop_dir "${2:?--stop takes the directory of the pool}"
		exit $?
		;;
	-h | --help) usage ;;
	*)
		echo "local-etcd-pool: unknown argument '$1'" >&2
		usage
		;;
	esac
done
case "$ndonors" in '' | *[!0-9]*) echo "local-etcd-pool: -n takes a number" >&2; exit 64 ;; esac
case "$base" in '' | *[!0-9]*) echo "local-etcd-pool: -p takes a port" >&2; exit 64 ;; esac
if [ "$ndonors" -gt 32 ] || [ $((base + 2001)) -gt 65535 ]; then
	echo "local-etcd-pool: -n $ndonors with -p $base runs out of ports" >&2
	exit 64
fi

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$memd" ]; then
	for c in "$root/build/release/memd/memd" "$root/build/debug/memd/memd" \
		"$(command -v memd || true)"; do
		if [ -n "$c" ] && [ -x "$c" ]; then
			memd=$c
			break
		fi
	done
fi
if [ -z "$memd" ] || [ ! -x "$memd" ]; then
	echo "local-etcd-pool: no memd binary; build one or give -m MEMD" >&2
	exit 64
fi
keys=$("$memd" -c /dev/null --print-config 2>/dev/null || true)
if ! grep -q '^etcd_endpoints =' <<<"$keys"; then
	echo "local-etcd-pool: $memd has no etcd backend (etcd_endpoints)" >&2
	exit 69
fi
[ -n "$etcd" ] || etcd=$(command -v etcd || true)
if [ -z "$etcd" ] || [ ! -x "$etcd" ]; then
	echo "local-etcd-pool: no etcd binary: apt-get install etcd-server" \
		"(deploy/install-deps.sh does), or give -e ETCD" >&2
	exit 69
fi

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in $(seq "$base" $((base + ndonors + 1))) $((base + 2000)) $((base + 2001)); do
	if port_busy "$p"; then
		echo "local-etcd-pool: port $p on 127.0.0.1 is in use; pick" \
			"another base with -p" >&2
		exit 64
	fi
done

dir=$(mktemp -d /tmp/tidepool-etcd-pool.XXXXXX)
chmod 700 "$dir"
umask 077
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/cluster.secret"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/tenant-demo.secret"
chmod 600 "$dir/cluster.secret" "$dir/tenant-demo.secret"
: >"$dir/pids"
pids=()
started=0
cleanup() {
	[ "$detach" -eq 1 ] && [ "$started" -eq 1 ] && return
	stop_dir "$dir" || true
}
trap cleanup EXIT
trap 'exit 0' INT TERM

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
echo $! >>"$dir/pids"
pids+=($!)
for _ in $(seq 1 100); do
	port_busy "$eport" && break
	sleep 0.1
done
port_busy "$eport" || {
	echo "local-etcd-pool: etcd did not start; its log:" >&2
	cat "$dir/etcd.log" >&2
	exit 1
}

# --- memds ---------------------------------------------------------------
r0=127.0.0.1:$base
r1=127.0.0.1:$((base + 1))
start_memd() {
	local name=$1 i=$2 conf="$dir/$1.conf" pid
	shift 2
	{
		echo "# $name (deploy/local-etcd-pool.sh)"
		echo "listen = 127.0.0.1:$((base + i))"
		echo "advertise = 127.0.0.1:$((base + i))"
		echo "provider = tcp"
		echo "donate = $size"
		echo "slab_size = $slab"
		echo "cluster_secret_file = $dir/cluster.secret"
		echo "donor_name = $name"
		printf '%s\n' "$@"
	} >"$conf"
	if ! "$memd" -c "$conf" --check-config >"$dir/$name.check" 2>&1; then
		echo "local-etcd-pool: $memd refuses $conf:" >&2
		cat "$dir/$name.check" >&2
		exit 1
	fi
	"$memd" -c "$conf" --ready-file "$dir/$name.ready" >"$dir/$name.log" 2>&1 &
	pid=$!
	echo "$pid" >>"$dir/pids"
	pids+=("$pid")
	for _ in $(seq 1 300); do
		[ -s "$dir/$name.ready" ] && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "local-etcd-pool: $name failed to start; its log:" >&2
			cat "$dir/$name.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "local-etcd-pool: $name not ready after 30 s; see $dir/$name.log" >&2
	exit 1
}
start_memd r0 0 "registry = etcd" "etcd_endpoints = 127.0.0.1:$eport" \
	"registry_peers = $r1"
start_memd r1 1 "registry = etcd" "etcd_endpoints = 127.0.0.1:$eport" \
	"registry_peers = $r0"
for i in $(seq 1 "$ndonors"); do
	start_memd "donor$i" $((i + 1)) "registry = $r0,$r1"
done
started=1

poolctl=$(dirname "$(dirname "$memd")")/poolctl/poolctl
[ -x "$poolctl" ] || poolctl=$(dirname "$memd")/poolctl
[ -x "$poolctl" ] || poolctl=$(command -v poolctl || true)
pc="${poolctl:-poolctl} -a $r0,$r1 -s $dir/cluster.secret"
if [ -n "$poolctl" ]; then
	for _ in $(seq 1 100); do # until one leads
		$pc donors >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! $pc tenant add demo --quota "$demo_quota" \
		--secret-file "$dir/tenant-demo.secret" >"$dir/poolctl.log" 2>&1; then
		echo "local-etcd-pool: poolctl could not add the tenant demo:" >&2
		cat "$dir/poolctl.log" >&2
		exit 1
	fi
fi

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
