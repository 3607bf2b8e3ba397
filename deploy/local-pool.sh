#!/usr/bin/env bash
# Starts a whole tidepool cluster pool on this host's loopback, for trying
# it out and for tests by hand (docs/cluster.md): one registry memd
# (registry = yes, which also donates) and N donor memds joined to it,
# each on its own control port (BASE, BASE+1, ...) and /metrics port
# (BASE+1000, ...), sharing a freshly generated cluster secret (mode 600)
# in a new temporary directory. It then prints how to point libpool and
# poolctl at the pool.
#
#   deploy/local-pool.sh [-n DONORS] [-d SIZE] [-s SLAB] [-p BASE]
#                        [-m MEMD] [--detach]
#   deploy/local-pool.sh --stop DIR
#
#   -n DONORS   donor memds besides the registry (default 2)
#   -d SIZE     donation of each memd (default 256M)
#   -s SLAB     slab size, one for the whole pool (default 16M)
#   -p BASE     first control port (default 7470)
#   -m MEMD     the memd binary (default: $MEMD, else build/release/memd/memd,
#               build/debug/memd/memd, then memd on PATH: the release
#               build first, as users run it; -m or $MEMD picks another)
#   --detach    leave the pool running and exit; stop it with --stop DIR
#               (default: run until Ctrl-C or SIGTERM, then stop every memd)
#
# Each memd locks its whole donation: SIZE must fit the memlock limit
# (ulimit -l) unless run as root, and the host needs (DONORS + 1) * SIZE
# free. Exit status: 0, 64 for bad usage, 69 when memd has no cluster
# modes, 1 when a memd fails to start (the memds started are stopped).
set -euo pipefail

ndonors=2
demo_quota=256M
size=256M
slab=16M
base=7470
memd=${MEMD:-}
detach=0

usage() {
	cat >&2 <<'EOF'
usage: local-pool.sh [-n DONORS] [-d SIZE] [-s SLAB] [-p BASE] [-m MEMD]
                     [--detach]
       local-pool.sh --stop DIR
  -n DONORS  donor memds besides the registry (default 2)
  -d SIZE    donation of each memd (default 256M)
  -s SLAB    slab size of the pool (default 16M)
  -p BASE    first control port (default 7470); /metrics from BASE+1000
  -m MEMD    the memd binary (default: $MEMD, else build/release's,
             build/debug's, then memd on PATH)
  --detach   leave the pool running; stop it later with --stop DIR
EOF
	exit 64
}

stop_dir() {
	local dir=$1 pid
	[ -f "$dir/pids" ] || {
		echo "local-pool: $dir/pids not found" >&2
		return 1
	}
	# donors first, the registry (first line) last
	for pid in $(tac "$dir/pids"); do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in $(tac "$dir/pids"); do
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	done
	echo "local-pool: stopped the memds of $dir (logs kept there)"
}

while [ $# -gt 0 ]; do
	case "$1" in
	-n) ndonors=${2:?}; shift 2 ;;
	-d) size=${2:?}; shift 2 ;;
	-s) slab=${2:?}; shift 2 ;;
	-p) base=${2:?}; shift 2 ;;
	-m) memd=${2:?}; shift 2 ;;
	--detach) detach=1; shift ;;
	--stop)
		stop_dir "${2:?--stop takes the directory of the pool}"
		exit $?
		;;
	-h | --help) usage ;;
	*)
		echo "local-pool: unknown argument '$1'" >&2
		usage
		;;
	esac
done
case "$ndonors" in '' | *[!0-9]*) echo "local-pool: -n takes a number" >&2; exit 64 ;; esac
case "$base" in '' | *[!0-9]*) echo "local-pool: -p takes a port" >&2; exit 64 ;; esac
if [ "$ndonors" -gt 64 ] || [ $((base + ndonors + 1000)) -gt 65535 ]; then
	echo "local-pool: -n $ndonors with -p $base runs out of ports or sense" >&2
	exit 64
fi

# --- the memd binary ---------------------------------------------------
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$memd" ]; then
	# release first: it is the build users run (and a debug build may
	# be stale or sanitized); -m or $MEMD chooses another
	for c in "$root/build/release/memd/memd" "$root/build/debug/memd/memd" \
		"$(command -v memd || true)"; do
		if [ -n "$c" ] && [ -x "$c" ]; then
			memd=$c
			break
		fi
	done
fi
if [ -z "$memd" ] || [ ! -x "$memd" ]; then
	echo "local-pool: no memd binary; build one (cmake -S . -B" \
		"build/release -DCMAKE_BUILD_TYPE=Release && cmake --build" \
		"build/release) or give -m MEMD" >&2
	exit 64
fi

# The cluster modes are recent (docs/cluster.md): say so plainly when this
# memd does not know them, rather than start standalone memds that ignore
# each other.
keys=$("$memd" -c /dev/null --print-config 2>/dev/null || true)
if ! grep -q '^registry =' <<<"$keys"; then
	echo "local-pool: $memd has no 'registry' key: it predates the" \
		"cluster modes (registry/donor), so it cannot form a pool." >&2
	echo "local-pool: build a memd with docs/cluster.md's control plane," \
		"or run one standalone memd instead (deploy/quickstart.sh)." >&2
	exit 69
fi

# --- ports -------------------------------------------------------------
port_busy() {
	# a listener answers the connect
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
for i in $(seq 0 "$ndonors"); do
	for p in $((base + i)) $((base + 1000 + i)); do
		if port_busy "$p"; then
			echo "local-pool: port $p on 127.0.0.1 is in use; pick" \
				"another base with -p" >&2
			exit 64
		fi
	done
done

# --- the pool's directory and secrets ----------------------------------
dir=$(mktemp -d /tmp/tidepool-pool.XXXXXX)
chmod 700 "$dir"
umask 077
# 32 random bytes, hex; memd reads the file's bytes less one newline and
# refuses a file that group or others may read
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/cluster.secret"
chmod 600 "$dir/cluster.secret"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/tenant-demo.secret"
chmod 600 "$dir/tenant-demo.secret"
mkdir -p "$dir/state"
: >"$dir/pids"

registry_addr=127.0.0.1:$base
pids=()

started=0
cleanup() {
	# a detached pool stays, but only once it is whole
	[ "$detach" -eq 1 ] && [ "$started" -eq 1 ] && return
	stop_dir "$dir" || true
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# start NAME INDEX [extra key = value lines...]
start_memd() {
	local name=$1 i=$2 conf="$dir/$1.conf" pid
	shift 2
	{
		echo "# $name of the local pool (deploy/local-pool.sh)"
		echo "listen = 127.0.0.1:$((base + i))"
		echo "advertise = 127.0.0.1:$((base + i))"
		echo "provider = tcp"
		echo "donate = $size"
		echo "slab_size = $slab"
		echo "cluster_secret_file = $dir/cluster.secret"
		echo "metrics_listen = 127.0.0.1:$((base + 1000 + i))"
		printf '%s\n' "$@"
	} >"$conf"
	if ! "$memd" -c "$conf" --check-config >"$dir/$name.check" 2>&1; then
		echo "local-pool: $memd refuses $conf:" >&2
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
			echo "local-pool: $name failed to start; its log:" >&2
			cat "$dir/$name.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "local-pool: $name not ready after 30 s; see $dir/$name.log" >&2
	exit 1
}

start_memd registry 0 "registry = yes" "state_dir = $dir/state" \
	"donor_name = registry"
for i in $(seq 1 "$ndonors"); do
	start_memd "donor$i" "$i" "registry = $registry_addr" \
		"donor_name = donor$i"
done

started=1

# The demo tenant, through poolctl when it is at hand (next to memd, or
# on PATH): the pool is then ready for a client at once.
poolctl=$(dirname "$(dirname "$memd")")/poolctl/poolctl # a build tree
[ -x "$poolctl" ] || poolctl=$(dirname "$memd")/poolctl # installed side by side
[ -x "$poolctl" ] || poolctl=$(command -v poolctl || true)
pc=""
if [ -n "$poolctl" ]; then
	pc="$poolctl -a $registry_addr -s $dir/cluster.secret"
	for _ in $(seq 1 50); do # the registry's own donor joins first
		$pc donors >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! $pc tenant add demo --quota "$demo_quota" \
		--secret-file "$dir/tenant-demo.secret" >"$dir/poolctl.log" 2>&1; then
		echo "local-pool: poolctl could not add the tenant demo:" >&2
		cat "$dir/poolctl.log" >&2
		exit 1
	fi
fi

# --- how to use it ------------------------------------------------------
echo "tidepool local pool in $dir ($((ndonors + 1)) memds, $size each," \
	"slab $slab)"
echo
printf '  %-9s %-16s %-36s %s\n' memd control metrics log
printf '  %-9s %-16s %-36s %s\n' registry "$registry_addr" \
	"http://127.0.0.1:$((base + 1000))/metrics" "$dir/registry.log"
for i in $(seq 1 "$ndonors"); do
	printf '  %-9s %-16s %-36s %s\n' "donor$i" "127.0.0.1:$((base + i))" \
		"http://127.0.0.1:$((base + 1000 + i))/metrics" \
		"$dir/donor$i.log"
done
cat <<EOF

cluster secret  $dir/cluster.secret   (mode 600; every memd and poolctl)
tenant secret   $dir/tenant-demo.secret   (for a tenant named demo)

Administer the pool with poolctl(8) as @admin:

  alias poolctl='${pc:-poolctl -a $registry_addr -s $dir/cluster.secret}'
  poolctl status; poolctl donors; poolctl tenants
EOF
if [ -z "$pc" ]; then
	echo "  poolctl tenant add demo --quota $demo_quota --secret-file $dir/tenant-demo.secret"
	echo "  (poolctl was not found: the tenant demo is not added yet)"
else
	echo "  (the tenant demo is added, quota $demo_quota)"
fi
cat <<EOF

Then connect a client (libpool(3)) as that tenant:

  export LIBPOOL_ADDR=$registry_addr
  export LIBPOOL_TENANT=demo
  export LIBPOOL_SECRET_FILE=$dir/tenant-demo.secret

EOF
if [ "$detach" -eq 1 ]; then
	echo "The pool keeps running; stop it with:"
	echo "  $0 --stop $dir"
	exit 0
fi
echo "Ctrl-C stops every memd (their logs stay in $dir)."
# wait returns when a signal arrives or a memd exits
while true; do
	for pid in "${pids[@]}"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "local-pool: memd pid $pid exited; stopping the" \
				"pool (see the logs in $dir)" >&2
			exit 1
		fi
	done
	sleep 1
done
