# shellcheck shell=bash
# shellcheck disable=SC2034 # what it sets (MEMD_ADDR, RAW, ...) is the caller's
# SPDX-License-Identifier: MIT
#
# bench/benchutil.sh - what the run_*.sh benchmark scripts share; sourced,
# not run. Sets ROOT (the repository root) and, unless set before,
# BENCH_NAME (the prefix of error lines: the script's name less .sh).
#
#   die MSG                   "BENCH_NAME: MSG" on stderr, exit 1
#   log MSG                   "HH:MM:SS MSG" on stderr
#   bench_python              PY: the python3 interpreter (not a shim)
#   bench_cli FIRST LAST ARG...
#                             -h/--help prints lines FIRST..LAST of $0;
#                             --summarize RAW... runs summarize on them;
#                             both exit. Anything else returns.
#   bench_need BIN...         each must be executable (else: build first)
#   bench_kvbench_knobs       the kvbench workload knobs' defaults, where
#                             the environment sets none: REPS=3 CAP=2560M
#                             SLAB=64M LAYERS=1 PROMPTS=60 SESSIONS=16
#                             TURNS=4 HBM=5
#   bench_out NAME            OUT_DIR made; RAW, SUMMARY, TMP (a fresh
#                             /tmp/NAME.XXXXXX, mode 700) set; cleanup
#                             trapped on EXIT, INT and TERM
#   run_cmd CMD...            runs CMD so that a signal need not wait
#   free_port                 a free TCP port on 127.0.0.1
#   tag REP                   appends rep=REP to result lines (filter)
#   bench_start_memd LOG ARG...
#                             $MEMD with ARG... and a fresh ready file,
#                             its output appended to LOG; under the
#                             command of the array BENCH_MEMD_WRAP when
#                             set (e.g. valgrind); waits BENCH_MEMD_WAIT_S
#                             (30) for it; sets MEMD_PID and MEMD_ADDR
#   bench_stop_memd           stops MEMD_PID (SIGTERM, waited for)
#   bench_start_redis CMD...  a redis-server on 127.0.0.1 when every CMD
#                             is installed; sets HAVE_REDIS (0/1),
#                             REDIS_PORT, REDIS_PID
#   bench_start_memcached ARG...
#                             a memcached on 127.0.0.1 (ARG... added, e.g.
#                             -t 2 -m 1024 -I 8m) when it is installed;
#                             sets HAVE_MEMCACHED (0/1), MEMCACHED_PORT,
#                             MEMCACHED_PID
#   bench_cpu_ticks PID       utime + stime of PID (/proc/PID/stat), in
#                             clock ticks (HZ: getconf CLK_TCK)
#   bench_finish              loadavg_end to RAW, the summary to SUMMARY
#                             and stdout
#   bench_summarize_py RAW... runs the Python on stdin over RAW... with
#                             bench/benchutil.py importable
#
# Every server started here is killed by pid on exit (never by name).

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
BENCH_NAME=${BENCH_NAME:-$(basename "$0" .sh)}

die() {
	echo "$BENCH_NAME: $*" >&2
	exit 1
}

log() {
	printf '%s %s\n' "$(date +%T)" "$*" >&2
}

bench_python() {
	command -v python3 >/dev/null || die "python3 is needed to parse results"
	# The interpreter itself, not a version manager's shim: a pyenv shim
	# costs seconds per call, and the scripts call python dozens of times.
	PY=$(python3 -c 'import sys; print(sys.executable)') ||
		die "python3 does not run"
}

bench_summarize_py() {
	PYTHONPATH="$BENCH_DIR${PYTHONPATH:+:$PYTHONPATH}" \
		PYTHONDONTWRITEBYTECODE=1 "$PY" - "$@"
}

bench_cli() { # first last args...
	local first=$1 last=$2 f
	shift 2
	case "${1:-}" in
	-h | --help)
		sed -n "${first},${last}p" "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	--summarize)
		shift
		[ $# -gt 0 ] || die "--summarize wants raw.txt files"
		for f in "$@"; do
			[ -r "$f" ] || die "cannot read $f"
		done
		summarize "$@"
		exit 0
		;;
	esac
}

bench_need() {
	local b
	for b in "$@"; do
		[ -x "$b" ] || die "$b not found: build first, e.g.
  cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release && make -C $BUILD -j2"
	done
}

bench_kvbench_knobs() {
	REPS=${REPS:-3}
	CAP=${CAP:-2560M}
	SLAB=${SLAB:-64M}
	LAYERS=${LAYERS:-1}
	PROMPTS=${PROMPTS:-60}
	SESSIONS=${SESSIONS:-16}
	TURNS=${TURNS:-4}
	HBM=${HBM:-5}
}

# pids of servers we started, killed by pid at exit (never by name)
PIDS=()
BENCH_MEMD_WRAP=()
# The program running now (see run_cmd): a signal must not wait for it to end.
CUR=
cleanup() {
	local p
	[ -z "$CUR" ] || kill "$CUR" 2>/dev/null || true
	for p in "${PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	[ -z "${TMP:-}" ] || rm -rf "$TMP"
}

bench_out() { # name
	mkdir -p "$OUT_DIR"
	RAW=$OUT_DIR/raw.txt
	SUMMARY=$OUT_DIR/summary.txt
	: >"$RAW"
	TMP=$(mktemp -d "/tmp/$1.XXXXXX")
	chmod 700 "$TMP"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

# Runs a program in the background and waits for it: bash runs a trap only
# once a foreground program is done, but a wait is interrupted at once.
run_cmd() {
	local rc=0
	"$@" &
	CUR=$!
	wait "$CUR" || rc=$?
	CUR=
	return $rc
}

free_port() {
	"$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

tag() { # rep: appends rep=N to result lines, keeps comments
	sed "/^#/!s/\$/ rep=$1/"
}

bench_start_memd() { # log args...
	local mlog=$1 wait_s=${BENCH_MEMD_WAIT_S:-30}
	shift
	rm -f "$TMP/memd.ready"
	"${BENCH_MEMD_WRAP[@]}" "$MEMD" --listen 127.0.0.1:0 \
		--log-level warning --ready-file "$TMP/memd.ready" "$@" \
		>>"$mlog" 2>&1 &
	MEMD_PID=$!
	PIDS+=("$MEMD_PID")
	for _ in $(seq $((wait_s * 10))); do
		[ -s "$TMP/memd.ready" ] && break
		kill -0 "$MEMD_PID" 2>/dev/null ||
			die "memd exited; its log ($mlog):
$(cat "$mlog")"
		sleep 0.1
	done
	[ -s "$TMP/memd.ready" ] ||
		die "memd not ready after $wait_s s (log: $mlog)"
	MEMD_ADDR=$(head -n1 "$TMP/memd.ready")
}

bench_stop_memd() {
	local p keep=()
	kill "$MEMD_PID" 2>/dev/null || true
	wait "$MEMD_PID" 2>/dev/null || true
	for p in "${PIDS[@]}"; do
		[ "$p" = "$MEMD_PID" ] || keep+=("$p")
	done
	PIDS=("${keep[@]}")
	MEMD_PID=
}

bench_start_redis() { # commands that must be installed
	local c
	HAVE_REDIS=0
	for c in "$@"; do
		if ! command -v "$c" >/dev/null; then
			log "$(
				IFS=/
				echo "$*"
			) not installed; skipping redis"
			return 0
		fi
	done
	REDIS_PORT=$(free_port)
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' \
		--appendonly no --protected-mode yes --loglevel warning \
		--daemonize no >"$OUT_DIR/redis.log" 2>&1 &
	REDIS_PID=$!
	PIDS+=("$REDIS_PID")
	for _ in $(seq 100); do
		redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 &&
			HAVE_REDIS=1 && break
		sleep 0.1
	done
	[ $HAVE_REDIS = 1 ] || log "redis-server did not come up; skipping redis (log: $OUT_DIR/redis.log)"
}

bench_start_memcached() { # memcached arguments
	local user=() st
	HAVE_MEMCACHED=0
	if ! command -v memcached >/dev/null; then
		log "memcached not installed; skipping memcached"
		return 0
	fi
	# memcached refuses to run as root without -u
	[ "$(id -u)" != 0 ] || user=(-u root)
	MEMCACHED_PORT=$(free_port)
	memcached "${user[@]}" -l 127.0.0.1 -p "$MEMCACHED_PORT" -U 0 "$@" \
		>"$OUT_DIR/memcached.log" 2>&1 &
	MEMCACHED_PID=$!
	PIDS+=("$MEMCACHED_PID")
	for _ in $(seq 100); do
		kill -0 "$MEMCACHED_PID" 2>/dev/null || break
		st=$("$PY" -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.sendall(b"version\r\n")
print(s.recv(64).decode().split()[0])' "$MEMCACHED_PORT" 2>/dev/null) || true
		[ "$st" = VERSION ] && HAVE_MEMCACHED=1 && break
		sleep 0.1
	done
	[ $HAVE_MEMCACHED = 1 ] || log "memcached did not come up; skipping memcached (log: $OUT_DIR/memcached.log)"
}

bench_cpu_ticks() { # pid: utime + stime in clock ticks
	# comm (field 2) may hold spaces: count from the last ')'
	sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

bench_finish() {
	echo "# loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,) elapsed_s=$(($(date +%s) - START_TIME))" >>"$RAW"
	summarize "$RAW" >"$SUMMARY"
	cat "$SUMMARY"
	log "results: $SUMMARY (raw lines: $RAW); took $(($(date +%s) - START_TIME)) s"
}
