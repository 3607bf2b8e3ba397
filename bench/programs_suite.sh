#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench/programs_suite.sh - the compatibility suite of issue 28: every real
# program of tests/programs/run.sh under libpool-preload.so, at an ample
# budget and at 50 % of its plain peak RSS, each compared byte for byte
# with a plain run (exit status, stdout, peak RSS bounded: see run.sh).
# Prints a Markdown table (pass/fail, plain and shim seconds, slowdown,
# peak RSS plain and under the shim, the budget) for docs/bench/paging.md,
# "Compatibility suite", and the load average before and after (figures
# taken while others load the machine are not speed figures).
#
#   bench/programs_suite.sh [BUILD_DIR] [ci|full]
#
# Environment: PROGRAMS (default: all of run.sh's), POLICIES (default
# "ample half"). Exit status 1 when any run failed (skips do not count).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build/release}
SCALE=${2:-ci}
PROGRAMS=${PROGRAMS:-"sqlite3 python3 sort threads numpy torch perl gcc git node redis xz shell deepbind"}
POLICIES=${POLICIES:-"ample half"}
export TP_MEMD=${TP_MEMD:-$BUILD/memd/memd}
export TP_PRELOAD=${TP_PRELOAD:-$BUILD/libpool/libpool-preload.so}
OUT=$(mktemp /tmp/tp-suite.XXXXXX)
trap 'rm -f "$OUT"' EXIT

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs;" \
	"build $BUILD; scale $SCALE"
rc=0
for p in $PROGRAMS; do
	for b in $POLICIES; do
		bash "$ROOT/tests/programs/run.sh" "$BUILD" "$p" "$SCALE" "$b" \
			>"$OUT.1" 2>"$OUT.2"
		r=$?
		line=$(grep '^result ' "$OUT.1" | tail -n1)
		[ -n "$line" ] || line="result $p $SCALE $b fail (no result line)"
		echo "$line" >>"$OUT"
		if [ $r != 0 ] && [ $r != 77 ]; then
			rc=1
			grep -h '^FAIL' "$OUT.1" "$OUT.2" | head -n2 >&2
		fi
	done
done
rm -f "$OUT.1" "$OUT.2"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| program | budget | result | plain s | shim s | slowdown | plain peak MiB | budget MiB | shim peak MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
while read -r _ p _ b res rest; do
	val() { # key
		echo "$rest" | tr ' ' '\n' | sed -n "s/^$1=//p"
	}
	ps=$(val plain_s) ss=$(val shim_s)
	slow=
	if [ -n "$ps" ] && [ -n "$ss" ]; then
		slow=$(awk -v a="$ps" -v b="$ss" \
			'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "-" }')
	fi
	case $res in
	skip) res="skip: ${rest#(}" res=${res%)} ;;
	esac
	echo "| $p | $b | $res | ${ps:--} | ${ss:--} | ${slow:--} |" \
		"$(val plain_mib) | $(val budget_mib) | $(val peak_mib) |"
done <"$OUT"
exit $rc
