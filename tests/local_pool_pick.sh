#!/bin/sh
# SPDX-License-Identifier: MIT
# deploy/local-pool.sh (and local-etcd-pool.sh, through the
# local-pool-lib.sh both source) picks its memd: $MEMD or -m first, then
# the release build, then the debug build, then memd on PATH. Run against
# a copy of the scripts in a scratch tree whose build/{debug,release}/memd/memd are stubs
# that only name themselves: each refuses --print-config, so local-pool.sh
# stops at once (exit 69) naming the memd it chose, and starts nothing.
#
#   tests/local_pool_pick.sh SOURCE_DIR
set -eu

src=${1:?usage: local_pool_pick.sh SOURCE_DIR}
tmp=$(mktemp -d /tmp/tp-localpool-XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
fail() {
	echo "local_pool_pick: $*" >&2
	exit 1
}

mkdir -p "$tmp/deploy" "$tmp/bin"
cp "$src/deploy/local-pool.sh" "$src/deploy/local-etcd-pool.sh" \
	"$src/deploy/local-pool-lib.sh" "$tmp/deploy/"
stub() { # stub PATH: a "memd" without cluster modes
	mkdir -p "$(dirname "$1")"
	printf '#!/bin/sh\nexit 0\n' >"$1"
	chmod +x "$1"
}

# picked [ARGS...]: the memd local-pool.sh chose (from its exit-69 message)
picked() {
	rc=0
	PATH="$tmp/bin:/usr/bin:/bin" "$tmp/deploy/local-pool.sh" "$@" \
		>"$tmp/out" 2>"$tmp/err" || rc=$?
	[ "$rc" -eq 69 ] || fail "exit $rc, want 69: $(cat "$tmp/err")"
	sed -n "s/^local-pool: \(.*\) has no 'registry' key.*/\1/p" "$tmp/err"
}

stub "$tmp/bin/memd"
[ "$(picked)" = "$tmp/bin/memd" ] || fail "PATH's memd not picked: $(picked)"
stub "$tmp/build/debug/memd/memd"
[ "$(picked)" = "$tmp/build/debug/memd/memd" ] ||
	fail "debug build not picked over PATH: $(picked)"
stub "$tmp/build/release/memd/memd"
[ "$(picked)" = "$tmp/build/release/memd/memd" ] ||
	fail "with both builds, release is not picked: $(picked)"
stub "$tmp/other/memd"
[ "$(MEMD=$tmp/other/memd picked)" = "$tmp/other/memd" ] ||
	fail "\$MEMD does not override"
[ "$(picked -m "$tmp/other/memd")" = "$tmp/other/memd" ] ||
	fail "-m does not override"
# local-etcd-pool.sh picks the same way (local-pool-lib.sh), and stops
# (69) at a memd without the etcd backend's keys
rc=0
PATH="$tmp/bin:/usr/bin:/bin" "$tmp/deploy/local-etcd-pool.sh" \
	>"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 69 ] || fail "local-etcd-pool.sh: exit $rc, want 69: $(cat "$tmp/err")"
grep -q "^local-etcd-pool: $tmp/build/release/memd/memd has no 'etcd_endpoints' key" \
	"$tmp/err" || fail "local-etcd-pool.sh did not pick the release build: $(cat "$tmp/err")"
for script in local-pool.sh local-etcd-pool.sh; do
	rc=0
	"$tmp/deploy/$script" -n x >"$tmp/out" 2>"$tmp/err" || rc=$?
	if [ "$rc" -ne 64 ] ||
		! grep -q "^${script%.sh}: -n takes a number" "$tmp/err"; then
		fail "$script -n x: exit $rc: $(cat "$tmp/err")"
	fi
done
"$tmp/deploy/local-pool.sh" --help 2>&1 | grep -q "build/release's" ||
	fail "usage does not say the release build comes first"
echo "local_pool_pick: ok"
