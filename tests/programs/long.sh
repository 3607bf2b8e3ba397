#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tests/programs/long.sh - the real-program tests (tests/programs/run.sh)
# at issue 13's full sizes, which take too long for CI on a 2-core VM:
# sqlite3 >= 1 GiB in :memory: under a 256 MiB process budget, python3
# with 10M + 10M small objects, GNU sort of 1 GiB, 8 threads with 1 GiB
# live; each of the last three under a quarter of its plain peak RSS.
#
#   tests/programs/long.sh [BUILD_DIR] [PROGRAM...]
#
# Needs about 5 GiB of free memory (the plain runs and memd's donation).
# Prints each test's lines and a summary; exits 1 if any failed.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build/release}
shift || true
[ $# -gt 0 ] || set -- sqlite3 python3 sort threads
rc=0
for p in "$@"; do
	t0=$(date +%s)
	nice bash "$ROOT/tests/programs/run.sh" "$BUILD" "$p" full
	r=$?
	echo "== $p full: exit $r in $(($(date +%s) - t0)) s"
	[ $r = 0 ] || [ $r = 77 ] || rc=1
done
exit $rc
