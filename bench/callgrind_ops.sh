#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench/callgrind_ops.sh BUILD [LABEL] - client-side instructions per
# operation, counted by valgrind's callgrind: deterministic enough to
# compare two trees on this noisy machine where timings cannot (a split,
# a refactor, a small change on the hot path). Starts a memd of BUILD on
# loopback and, for the same-host path and for tcp (LIBPOOL_SHM=off):
#   poolbench 4 KiB read and write at depth 1, 4 KiB read at depth 16,
#   1 MiB read at depth 4: (Ir at 10000 ops - Ir at 2000 ops) / 8000,
#   so start-up cancels out;
#   kvbench shared, 64 KiB blocks: Ir of 36 prompts - Ir of 12.
# Only the client process is counted (memd is not under valgrind). The
# tcp path's counts vary with how often its progress loop polls; compare
# the same-host lines and kvbench first. One line per point on stdout:
#   LABEL shm|tcp poolbench OP SIZE dDEPTH Ir/op=N
# Usage: bench/callgrind_ops.sh build/release before
#        bench/callgrind_ops.sh /other/tree/build/release after
set -euo pipefail
B=${1:?usage: $0 BUILD [LABEL]}
L=${2:-$(basename "$(dirname "$B")")}
command -v valgrind >/dev/null || {
	echo "callgrind_ops: valgrind not installed" >&2
	exit 1
}
for b in memd/memd bench/poolbench bench/kvbench; do
	[ -x "$B/$b" ] || {
		echo "callgrind_ops: $B/$b missing (build it first)" >&2
		exit 1
	}
done
O=$(mktemp -d /tmp/callgrind_ops.XXXXXX)
"$B/memd/memd" --listen 127.0.0.1:0 --log-level warning \
	--ready-file "$O/ready" --donate 1G --slab-size 64M >"$O/memd.log" 2>&1 &
MP=$!
trap 'kill $MP 2>/dev/null; wait $MP 2>/dev/null; rm -rf "$O"' EXIT
for _ in $(seq 100); do
	[ -s "$O/ready" ] && break
	sleep 0.1
done
[ -s "$O/ready" ] || {
	echo "callgrind_ops: memd not ready: $(cat "$O/memd.log")" >&2
	exit 1
}
A=$(head -n1 "$O/ready")
ir() { grep -m1 '^summary:' "$1" | awk '{print $2}'; }
cg() { valgrind --tool=callgrind --callgrind-out-file="$1" "${@:2}" >/dev/null 2>&1; }
for mode in shm tcp; do
	if [ $mode = tcp ]; then export LIBPOOL_SHM=off; else unset LIBPOOL_SHM; fi
	for pt in "read 4K 1" "write 4K 1" "read 4K 16" "read 1M 4"; do
		read -r op sz d <<<"$pt"
		for n in 2000 10000; do
			cg "$O/pb.$n" "$B/bench/poolbench" run -a "$A" --rw "$op" \
				-s "$sz" -d "$d" -n $n -w 0 -r 64M
		done
		echo "$L $mode poolbench $op $sz d$d Ir/op=$((($(ir "$O/pb.10000") - $(ir "$O/pb.2000")) / 8000))"
	done
	for n in 12 36; do
		cg "$O/kv.$n" "$B/bench/kvbench" --tier tidepool --workload shared \
			--addr "$A" --prompts $n --layers 1 --block 65536
	done
	echo "$L $mode kvbench shared 64K Ir/24prompts=$(($(ir "$O/kv.36") - $(ir "$O/kv.12")))"
done
