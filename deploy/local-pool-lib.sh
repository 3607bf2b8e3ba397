# SPDX-License-Identifier: MIT
# shellcheck shell=bash disable=SC2154 # the caller sets prog, base, ndonors, ...
# Shared by deploy/local-pool.sh and deploy/local-etcd-pool.sh, which
# source it (bash; not run on its own): what both do to run memds on this
# host's loopback. The caller sets `prog` (its name, for messages) before
# sourcing, and these as it goes: `memd`, `base`, `size`, `slab`,
# `detach`; lp_make_dir sets `dir`, the lp_start_* functions append to
# `pids` and DIR/pids. Errors say "$prog: ..." on stderr.

# lp_stop_dir DIR KEPT: SIGTERM every process of DIR/pids, last started
# first, each waited for before the next (donors leave before their
# registry, a registry before etcd); KEPT says what stays in DIR.
lp_stop_dir() {
	local dir=$1 kept=$2 pid
	[ -f "$dir/pids" ] || {
		echo "$prog: $dir/pids not found" >&2
		return 1
	}
	for pid in $(tac "$dir/pids"); do
		kill -TERM "$pid" 2>/dev/null || true
		while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	done
	echo "$prog: stopped the processes of $dir ($kept kept there)"
}

# lp_opt KEPT ARG...: takes the option at the head of ARG... that both
# scripts have (-n -d -s -p -m --detach --stop -h); sets lp_took to the
# words it took (0: not one of them). --stop stops the pool (lp_stop_dir
# DIR KEPT) and exits; -h calls the caller's usage.
# shellcheck disable=SC2034 # lp_took and what the options set: the caller's
lp_opt() {
	local kept=$1
	shift
	lp_took=2
	case "$1" in
	-n) ndonors=${2:?} ;;
	-d) size=${2:?} ;;
	-s) slab=${2:?} ;;
	-p) base=${2:?} ;;
	-m) memd=${2:?} ;;
	--detach) detach=1 lp_took=1 ;;
	--stop)
		lp_stop_dir "${2:?--stop takes the directory of the pool}" "$kept"
		exit $?
		;;
	-h | --help) usage ;;
	*) lp_took=0 ;;
	esac
}

# lp_check_numbers MAXDONORS 'LASTPORT': -n and -p are numbers, and the
# pool's last port, the arithmetic expression LASTPORT (of base and
# ndonors), exists (exit 64 otherwise).
lp_check_numbers() {
	case "$ndonors" in '' | *[!0-9]*) echo "$prog: -n takes a number" >&2; exit 64 ;; esac
	case "$base" in '' | *[!0-9]*) echo "$prog: -p takes a port" >&2; exit 64 ;; esac
	if [ "$ndonors" -gt "$1" ] || [ $(($2)) -gt 65535 ]; then
		echo "$prog: -n $ndonors with -p $base runs out of ports or sense" >&2
		exit 64
	fi
}

# lp_find_memd KEY: sets memd, unless -m or $MEMD did: the release build
# first (the build users run; a debug build may be stale or sanitized),
# then the debug build, then memd on PATH. Exit 64 when there is none,
# 69 when its --print-config has no KEY (a memd older than the modes the
# pool needs: say so rather than start memds that ignore each other).
lp_find_memd() {
	local root c keys
	root=$(cd "$(dirname "$0")/.." && pwd)
	if [ -z "$memd" ]; then
		for c in "$root/build/release/memd/memd" \
			"$root/build/debug/memd/memd" "$(command -v memd || true)"; do
			if [ -n "$c" ] && [ -x "$c" ]; then
				memd=$c
				break
			fi
		done
	fi
	if [ -z "$memd" ] || [ ! -x "$memd" ]; then
		echo "$prog: no memd binary; build one (cmake -S . -B" \
			"build/release -DCMAKE_BUILD_TYPE=Release && cmake --build" \
			"build/release) or give -m MEMD" >&2
		exit 64
	fi
	keys=$("$memd" -c /dev/null --print-config 2>/dev/null || true)
	if ! grep -q "^$1 =" <<<"$keys"; then
		echo "$prog: $memd has no '$1' key: it predates the modes" \
			"this pool needs (docs/cluster.md)" >&2
		exit 69
	fi
}

# lp_port_busy PORT: a listener on 127.0.0.1:PORT answers the connect.
lp_port_busy() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# lp_ports_free PORT...: exit 64 naming the first one in use.
lp_ports_free() {
	local p
	for p in "$@"; do
		if lp_port_busy "$p"; then
			echo "$prog: port $p on 127.0.0.1 is in use; pick" \
				"another base with -p" >&2
			exit 64
		fi
	done
}

# lp_make_dir PREFIX: dir=/tmp/PREFIX.XXXXXX (0700), a fresh cluster
# secret and the tenant demo's secret in it (32 random bytes in hex, mode
# 0600: memd reads the file's bytes less one newline and refuses a file
# that group or others may read), an empty pids file; the EXIT trap stops
# what was started unless the pool is detached and whole (started=1).
lp_make_dir() {
	dir=$(mktemp -d "/tmp/$1.XXXXXX")
	chmod 700 "$dir"
	umask 077
	od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/cluster.secret"
	od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$dir/tenant-demo.secret"
	chmod 600 "$dir/cluster.secret" "$dir/tenant-demo.secret"
	: >"$dir/pids"
	pids=()
	started=0
	trap lp_cleanup EXIT
	trap 'exit 0' INT TERM
}

lp_cleanup() {
	[ "$detach" -eq 1 ] && [ "$started" -eq 1 ] && return
	lp_stop_dir "$dir" "logs" || true
}

# lp_started PID: records a process of the pool.
lp_started() {
	echo "$1" >>"$dir/pids"
	pids+=("$1")
}

# lp_start_memd NAME INDEX [key = value lines...]: writes DIR/NAME.conf
# (control port BASE+INDEX, tcp, the pool's donation, slab size and
# cluster secret, then the lines given), has memd check it, starts memd
# and waits up to 30 s for its ready file; exit 1 with its log when it
# refuses the file, dies or is not ready.
lp_start_memd() {
	local name=$1 i=$2 conf="$dir/$1.conf" pid
	shift 2
	{
		echo "# $name of the local pool ($prog)"
		echo "listen = 127.0.0.1:$((base + i))"
		echo "advertise = 127.0.0.1:$((base + i))"
		echo "provider = tcp"
		echo "donate = $size"
		echo "slab_size = $slab"
		echo "cluster_secret_file = $dir/cluster.secret"
		printf '%s\n' "$@"
	} >"$conf"
	if ! "$memd" -c "$conf" --check-config >"$dir/$name.check" 2>&1; then
		echo "$prog: $memd refuses $conf:" >&2
		cat "$dir/$name.check" >&2
		exit 1
	fi
	"$memd" -c "$conf" --ready-file "$dir/$name.ready" >"$dir/$name.log" 2>&1 &
	pid=$!
	lp_started "$pid"
	for _ in $(seq 1 300); do
		[ -s "$dir/$name.ready" ] && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "$prog: $name failed to start; its log:" >&2
			cat "$dir/$name.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "$prog: $name not ready after 30 s; see $dir/$name.log" >&2
	exit 1
}

# lp_add_demo ADDRS QUOTA: sets poolctl (next to memd in a build tree or
# an install, else on PATH; "" when there is none) and pc (its command
# line as @admin of ADDRS); with a poolctl, waits up to 10 s for a
# registry that answers, then adds the tenant demo with DIR's secret.
lp_add_demo() {
	poolctl=$(dirname "$(dirname "$memd")")/poolctl/poolctl # a build tree
	[ -x "$poolctl" ] || poolctl=$(dirname "$memd")/poolctl # installed
	[ -x "$poolctl" ] || poolctl=$(command -v poolctl || true)
	pc="${poolctl:-poolctl} -a $1 -s $dir/cluster.secret"
	[ -n "$poolctl" ] || return 0
	for _ in $(seq 1 100); do # the leader's own donor joins first
		$pc donors >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! $pc tenant add demo --quota "$2" \
		--secret-file "$dir/tenant-demo.secret" >"$dir/poolctl.log" 2>&1; then
		echo "$prog: poolctl could not add the tenant demo:" >&2
		cat "$dir/poolctl.log" >&2
		exit 1
	fi
}
