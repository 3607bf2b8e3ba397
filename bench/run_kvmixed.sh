#!/bin/bash
# SPDX-License-Identifier: MIT
#
# bench/run_kvmixed.sh LABEL=BUILD... - kvmixed (the KV store's eviction
# for a size class the spent share has no block of, docs/bench/kv.md,
# "New size classes at the share") for several build trees side by side:
# each point (trace x slab) runs every tree in turn, so they share the
# machine's load. Then, with CALLGRIND=1 (the default when valgrind is
# installed), each point once more under callgrind, counting only the
# put path (memd_kv_reserve + memd_kv_commit): instructions per put,
# which compare where timings cannot on a loaded machine.
#   RUNS=11        fresh stores a point (kvmixed's medians)
#   SLABS="16M 64M"
#   POINTS="lmcache:0 lmtail:0 drift:0.25 drift:0 single:0" (TRACE:RAMP)
# Output: kvmixed's KVMIXED lines, each after its LABEL, then lines
#   LABEL CG trace=T slab=S ramp=R puts=N Ir=I Ir_per_put=P
# Usage: bench/run_kvmixed.sh old=/tmp/old/build/rel new=build/rel
set -euo pipefail
[ $# -ge 1 ] || {
	echo "usage: $0 LABEL=BUILD..." >&2
	exit 2
}
RUNS=${RUNS:-11}
SLABS=${SLABS:-16M 64M}
POINTS=${POINTS:-lmcache:0 lmtail:0 drift:0.25 drift:0 single:0}
if [ -z "${CALLGRIND:-}" ]; then
	CALLGRIND=0
	command -v valgrind >/dev/null && CALLGRIND=1
fi
for v in "$@"; do
	[ -x "${v#*=}/bench/kvmixed" ] || {
		echo "run_kvmixed: ${v#*=}/bench/kvmixed missing (build it)" >&2
		exit 1
	}
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
for slab in $SLABS; do
	for pt in $POINTS; do
		for v in "$@"; do
			echo "${v%%=*} $("${v#*=}/bench/kvmixed" "${pt%%:*}" \
				"$slab" "$RUNS" "${pt#*:}")"
		done
	done
done
echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$CALLGRIND" = 1 ] || exit 0
O=$(mktemp -d /tmp/run_kvmixed.XXXXXX)
trap 'rm -rf "$O"' EXIT
for slab in $SLABS; do
	for pt in $POINTS; do
		for v in "$@"; do
			line=$(valgrind --tool=callgrind \
				--callgrind-out-file="$O/cg.out" \
				--toggle-collect=memd_kv_reserve \
				--toggle-collect=memd_kv_commit \
				"${v#*=}/bench/kvmixed" "${pt%%:*}" "$slab" 1 \
				"${pt#*:}" 2>/dev/null)
			ir=$(grep -m1 '^summary:' "$O/cg.out" | awk '{print $2}')
			puts=${line##* puts=}
			puts=${puts%% *}
			echo "${v%%=*} CG trace=${pt%%:*} slab=$slab" \
				"ramp=${pt#*:} puts=$puts Ir=$ir" \
				"Ir_per_put=$((ir / puts))"
		done
	done
done
