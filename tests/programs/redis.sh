#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tests/programs/redis.sh - redis-server as tests/programs/run.sh runs it
# (plain and under libpool-preload.so, which the environment gives every
# process here):
#
#   redis.sh DIR N
#
# redis-server listens on a unix socket in DIR (no TCP port: nothing to
# collide with); redis-benchmark loads it (N requests of each of SET, GET,
# LPUSH, LPOP, INCR, HSET, 16 pipelined); then N keys, lists and hashes
# are written in a deterministic order, and what must be the same in
# every run is printed: DBSIZE, DEBUG DIGEST (a hash of the whole data
# set), a few values. redis-server then shuts down without saving; its
# exit status is this script's.
set -u
DIR=${1:?usage: redis.sh DIR N}
N=${2:?usage: redis.sh DIR N}
SOCK=$DIR/redis.sock
cli() {
	redis-cli -s "$SOCK" "$@"
}

redis-server --port 0 --unixsocket "$SOCK" --save '' --appendonly no \
	--enable-debug-command local --dir "$DIR" >"$DIR/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
	[ "$(cli ping 2>/dev/null)" = PONG ] && break
	kill -0 $pid 2>/dev/null || {
		echo "redis-server exited: $(tail -3 "$DIR/server.log")" >&2
		exit 1
	}
	sleep 0.1
done
redis-benchmark -s "$SOCK" -q -n "$N" -P 16 -d 100 \
	-t set,get,lpush,lpop,incr,hset >/dev/null || {
	echo "redis-benchmark failed" >&2
	exit 1
}
cli flushall >/dev/null
awk -v n="$N" 'BEGIN {
	for (i = 0; i < n; i++)
		printf "SET k:%d %s\nRPUSH l:%d v%d\nHSET h:%d f%d %d\n",
			i, sprintf("%0" (20 + i % 200) "d", i), i % 97, i,
			i % 1000, i, i * 7
}' | cli --pipe >"$DIR/pipe.out" || {
	echo "redis-cli --pipe failed: $(tail -2 "$DIR/pipe.out")" >&2
	exit 1
}
cli dbsize
cli debug digest
cli llen l:5
cli lrange l:42 0 3
cli hget h:999 f1999
cli get "k:$((N / 2))"
cli shutdown nosave >"$DIR/shutdown.out" 2>&1
for _ in $(seq 300); do
	kill -0 $pid 2>/dev/null || break
	sleep 0.1
done
if kill -0 $pid 2>/dev/null; then
	echo "redis-server still running 30 s after SHUTDOWN NOSAVE:" \
		"$(cat "$DIR/shutdown.out"; tail -3 "$DIR/server.log")" >&2
	kill -9 $pid
	exit 1
fi
wait $pid
