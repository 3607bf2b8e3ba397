#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/programs/hashz_check.sh TP_PROGRAMS - the skewed hash table of
# bench/paging_programs.sh (workload hashz: tp_programs hash MIB zipf
# THETA) is deterministic (two runs print the same line), makes only hits
# (as many as the table holds keys: slots / 2), differs from the uniform
# run, and refuses a THETA outside (0, 1) with exit 64; the hot-set
# workload (tp_programs hot MIB) is deterministic too.
# Exit 0 (pass) or 1 naming the problem.
set -u
tpp=${1:?usage: hashz_check.sh TP_PROGRAMS}
fail() {
	echo "FAIL hashz: $*" >&2
	exit 1
}
a=$("$tpp" hash 4 zipf 0.99) || fail "exit $?"
b=$("$tpp" hash 4 zipf 0.99) || fail "exit $? (second run)"
u=$("$tpp" hash 4) || fail "exit $? (uniform)"
[ "$a" = "$b" ] || fail "two runs differ: '$a' '$b'"
case $a in
*" slots=262144 hits=131072 "*) ;;
*) fail "not all 131072 lookups hit: '$a'" ;;
esac
[ "$a" != "$u" ] || fail "same as the uniform run: '$a'"
for bad in 0 1 1.5 -0.5 x; do
	"$tpp" hash 4 zipf "$bad" >/dev/null 2>&1
	[ $? = 64 ] || fail "zipf $bad accepted"
done
# hot (bench/paging_programs.sh's hot set): deterministic, and not the
# scan's line
h=$("$tpp" hot 4) || fail "hot: exit $?"
h2=$("$tpp" hot 4) || fail "hot: exit $? (second run)"
[ "$h" = "$h2" ] || fail "hot: two runs differ: '$h' '$h2'"
case $h in
"hot n=524288 sum="*) ;;
*) fail "hot: unexpected line '$h'" ;;
esac
echo "ok hashz: $a"
echo "ok hot: $h"
