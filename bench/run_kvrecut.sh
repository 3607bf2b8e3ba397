#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench/run_kvrecut.sh LABEL=BUILD... - kvrecut (a slab re-cut for a new
# size class when the tenant's emptiest slab keeps a pinned block,
# docs/bench/kv.md, "The slab's entries through its blocks") for several
# build trees: each share under callgrind, counting memd_kv_reserve only,
# once with ROUNDS new-class puts and once with none; the difference over
# ROUNDS is the instructions of one such put (its evictions included).
#   SLAB=16M  SHARES="16 64 256"  ROUNDS=12
# Output: kvrecut's KVRECUT line after each LABEL, then
#   LABEL CG slab=S share=N entries=E rounds=R Ir_per_put=P
# Usage: bench/run_kvrecut.sh main=/tmp/main/build/rel new=build/rel
set -euo pipefail
[ $# -ge 1 ] || {
	echo "usage: $0 LABEL=BUILD..." >&2
	exit 2
}
SLAB=${SLAB:-16M}
SHARES=${SHARES:-16 64 256}
ROUNDS=${ROUNDS:-12}
command -v valgrind >/dev/null || {
	echo "run_kvrecut: valgrind missing" >&2
	exit 1
}
for v in "$@"; do
	[ -x "${v#*=}/bench/kvrecut" ] || {
		echo "run_kvrecut: ${v#*=}/bench/kvrecut missing (build it)" >&2
		exit 1
	}
done
O=$(mktemp -d /tmp/run_kvrecut.XXXXXX)
trap 'rm -rf "$O"' EXIT
# callgrind's count of memd_kv_reserve over one run of kvrecut
ir() {
	valgrind --tool=callgrind --callgrind-out-file="$O/cg.out" \
		--toggle-collect=memd_kv_reserve "$@" >"$O/line" 2>/dev/null
	grep -m1 '^summary:' "$O/cg.out" | awk '{print $2}'
}
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for share in $SHARES; do
	for v in "$@"; do
		b="${v#*=}/bench/kvrecut"
		base=$(ir "$b" "$SLAB" "$share" 0)
		all=$(ir "$b" "$SLAB" "$share" "$ROUNDS")
		line=$(cat "$O/line")
		entries=${line##* entries=}
		entries=${entries%% *}
		echo "${v%%=*} $line"
		echo "${v%%=*} CG slab=$SLAB share=$share entries=$entries" \
			"rounds=$ROUNDS Ir_per_put=$(((all - base) / ROUNDS))"
	done
done
