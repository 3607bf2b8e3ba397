#!/bin/sh
# SPDX-License-Identifier: MIT
# A test run leaves nothing behind (tests/testutil.c, "Scratch
# directories"): runs `test_memd --scratch-fail`, whose one forked test
# starts memd, writes a file into memd's scratch directory and fails
# without stopping memd. Afterwards /tmp/tp-test-PID (PID of that run) must
# be gone and its memd no longer running.
#
#   tests/scratch_cleanup.sh TEST_MEMD     (TP_MEMD set, as ctest does)
# Exit 0, 1 (saying what was left), 77 (TP_MEMD unset).
set -u
bin=${1:?usage: scratch_cleanup.sh TEST_MEMD}
[ -n "${TP_MEMD:-}" ] || {
	echo "scratch_cleanup: skipped: TP_MEMD is not set" >&2
	exit 77
}
log=$(mktemp /tmp/tp-scratch-log.XXXXXX)
trap 'rm -f "$log"' EXIT
env -u TP_KEEP_LOGS "$bin" --scratch-fail >"$log" 2>&1 &
pid=$!
wait "$pid"
st=$?
if [ "$st" -ne 3 ]; then
	echo "scratch_cleanup: test_memd --scratch-fail exited $st, not 3:" >&2
	cat "$log" >&2
	exit 1
fi
memd=$(sed -n 's/^memd pid \([0-9]*\) dir .*/\1/p' "$log")
dir=$(sed -n 's/^memd pid [0-9]* dir \(.*\)/\1/p' "$log")
case $dir in
"/tmp/tp-test-$pid/"*) ;;
*)
	echo "scratch_cleanup: memd's directory '$dir' is not under" \
		"/tmp/tp-test-$pid" >&2
	exit 1
	;;
esac
if [ -e "/tmp/tp-test-$pid" ]; then
	echo "scratch_cleanup: left behind: $(find "/tmp/tp-test-$pid")" >&2
	exit 1
fi
# the memd that the failed test started (SIGKILLed: give the kernel a
# moment to reap what init adopted)
i=0
while [ -n "$memd" ] && [ -e "/proc/$memd" ] &&
	grep -q "/tmp/tp-test-$pid/" "/proc/$memd/cmdline" 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 50 ]; then
		echo "scratch_cleanup: memd $memd still runs" >&2
		exit 1
	fi
	sleep 0.1
done
echo "scratch_cleanup: ok (/tmp/tp-test-$pid removed, memd $memd gone)"
