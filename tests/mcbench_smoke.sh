#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/mcbench_smoke.sh MCBENCH - bench/mcbench against a memcached it
# starts on a free loopback port: a short sweep passes (result lines for
# get and set, server CPU on them); a value of the wrong length, a miss
# and bad arguments make it fail. Skipped (77) where memcached is not
# installed.
set -u
MCB=${1:?usage: mcbench_smoke.sh MCBENCH}
command -v memcached >/dev/null 2>&1 || {
	echo "mcbench_smoke: memcached not installed; skipped"
	exit 77
}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# shellcheck source=deploy/scratch-lib.sh
. "$(dirname "$0")/../deploy/scratch-lib.sh"
scratch_start mcbench_smoke
T=$SCRATCH
fail() {
	echo "mcbench_smoke: FAIL: $*"
	[ ! -s "$T/err" ] || sed 's/^/  stderr: /' "$T/err"
	exit 1
}

# memcached: a free port, by a bind of our own (a race only with other
# programs picking ports at the same instant); as root it needs -u.
PORT=$("$PY" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
U=
[ "$(id -u)" != 0 ] || U="-u root"
# shellcheck disable=SC2086 # U is zero or two words
memcached $U -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 64 -I 2m \
	>"$T/mc.log" 2>&1 &
SERVER_PID=$!
mc() { # send the bytes of $1 (printf format) and print the reply
	"$PY" - "$PORT" "$1" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
time.sleep(0.05)
print(s.recv(4096).decode(errors="replace").strip())
PYEOF
}
up=0
for _ in $(seq 50); do
	[ "$(mc 'version\r\n' 2>/dev/null | cut -c1-7)" = VERSION ] && up=1 && break
	sleep 0.1
done
[ $up = 1 ] || fail "memcached did not come up: $(cat "$T/mc.log")"

# 1. a short sweep passes, with every point's line and server CPU
"$MCB" -a "127.0.0.1:$PORT" -s 4K,1M -d 1,4 -n 200 -w 0 --verify-every 1 \
	--server-pid "$SERVER_PID" >"$T/out" 2>"$T/err" || fail "the sweep exited $?"
n=$(grep -c '^memcached op=\(get\|set\) .* ops_s=.* srv_cpu_us=' "$T/out")
[ "$n" = 8 ] || fail "want 8 result lines with srv_cpu_us, got $n: $(cat "$T/out")"
grep -q '^# mcbench verified_values=[1-9]' "$T/out" ||
	fail "no value was compared byte for byte"

# 2. a value of the wrong length fails the point, naming the key
[ "$(mc 'set mcbench:4096:0 0 0 5\r\nhello\r\n')" = STORED ] ||
	fail "could not store the short value"
"$MCB" -a "127.0.0.1:$PORT" -s 4K -d 1 -n 10 -w 0 --rw read --keys 1 \
	--no-preset >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 1 ] || fail "a 5-byte value for a 4 KiB GET: exit $rc, want 1"
grep -q 'mcbench:4096:0: value of 5 bytes, expected 4096' "$T/err" ||
	fail "no line naming the wrong length"

# 3. a miss fails too
"$MCB" -a "127.0.0.1:$PORT" -s 8K -d 1 -n 10 -w 0 --rw read --no-preset \
	>"$T/out" 2>"$T/err"
rc=$?
[ $rc = 1 ] || fail "a miss: exit $rc, want 1"
grep -q 'miss' "$T/err" || fail "no line saying it missed"

# 4. bad arguments: exit 2 with a line saying what is wrong
for a in "--keys 0" "--addr nohostport" "--sizes 4X" "--server-pid 0" \
	"--depths 999" "extra"; do
	# shellcheck disable=SC2086 # a is words on purpose
	"$MCB" $a >"$T/out" 2>"$T/err"
	rc=$?
	[ $rc = 2 ] || fail "'$a': exit $rc, want 2"
	grep -q "^mcbench: " "$T/err" || fail "'$a': no error line"
done
: >"$T/err"
echo "mcbench_smoke: ok"
