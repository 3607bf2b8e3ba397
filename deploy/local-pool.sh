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
# What it shares with local-etcd-pool.sh is in local-pool-lib.sh, beside
# it (sourced).
set -euo pipefail

prog=local-pool
# shellcheck source=deploy/local-pool-lib.sh
. "$(dirname "$0")/local-pool-lib.sh"

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

while [ $# -gt 0 ]; do
	lp_opt logs "$@"
	if [ "$lp_took" = 0 ]; then
		echo "local-pool: unknown argument '$1'" >&2
		usage
	fi
	shift "$lp_took"
done
lp_check_numbers 64 'base + ndonors + 1000'
lp_find_memd registry
lp_ports_free $(seq "$base" $((base + ndonors))) \
	$(seq $((base + 1000)) $((base + 1000 + ndonors)))

lp_make_dir tidepool-pool
mkdir -p "$dir/state"
registry_addr=127.0.0.1:$base
# NAME INDEX [lines...]: a memd of the pool with its /metrics port
start_memd() {
	lp_start_memd "$1" "$2" \
		"metrics_listen = 127.0.0.1:$((base + 1000 + $2))" "${@:3}"
}
start_memd registry 0 "registry = yes" "state_dir = $dir/state" \
	"donor_name = registry"
for i in $(seq 1 "$ndonors"); do
	start_memd "donor$i" "$i" "registry = $registry_addr" \
		"donor_name = donor$i"
done
started=1

# The demo tenant, through poolctl when it is at hand: the pool is then
# ready for a client at once.
lp_add_demo "$registry_addr" "$demo_quota"

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

  alias poolctl='$pc'
  poolctl status; poolctl donors; poolctl tenants
EOF
if [ -z "$poolctl" ]; then
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
