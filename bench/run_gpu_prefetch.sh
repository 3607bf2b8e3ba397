#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_gpu_prefetch.sh - GPU prefetch benchmark in one go: build (if
# needed), start a memd on loopback, run gpu_prefetch, print the results.
# Made to fit a short session on a GPU machine: the whole run stops
# starting configurations once DEADLINE_S is near (default 420 s, build
# included), so it ends well inside a 10-minute command limit.
#
# usage: bench/run_gpu_prefetch.sh [BUILD_DIR]   (or BUILD=dir; default
#        build-gpu-bench at the repository root). Knobs (environment):
#   BACKEND=auto|cuda|host  auto: cuda when a device is usable, else host
#   SIZE=256M STAGING=4M COUNT=4 REPS=5 DIRS=fetch,store DEVICE=0
#   SWEEP=1        also run STAGING x COUNT = {1M,4M,16M} x {2,4,8}
#   TESTS=1        also run the test_gpu suite (its CUDA round trip runs
#                  when a device is usable)
#   REBUILD=1      configure and build even when the binaries exist
#   BUILD_ONLY=1   build, check the prerequisites, and stop
#   DEADLINE_S=420 no new configuration starts later than this (seconds
#                  since the script started); each run is also killed at it
#   OUT_DIR=$OUT/gpu-prefetch when $OUT is set (the device machine's
#          result folder), else <BUILD>/gpu-prefetch-results/<time>
# The build is Release with the CUDA backend when CMake finds the toolkit
# (/usr/local/cuda or CUDAToolkit_ROOT). memd listens on 127.0.0.1 only
# and is killed on exit. The benchmark runs with LIBPOOL_LOG=info, so
# bench.log says which NUMA node the engine chose and whether the path is
# staged or direct (FI_HMEM); topology.txt has what nvidia-smi and the
# kernel say, to check that choice against.
set -euo pipefail

# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
case "${1:-}" in
-h | --help)
	sed -n '4,28p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
esac
BUILD=${1:-${BUILD:-$ROOT/build-gpu-bench}}
BACKEND=${BACKEND:-auto}
SIZE=${SIZE:-256M}
STAGING=${STAGING:-4M}
COUNT=${COUNT:-4}
REPS=${REPS:-5}
DIRS=${DIRS:-fetch,store}
DEVICE=${DEVICE:-0}
SWEEP=${SWEEP:-0}
TESTS=${TESTS:-0}
REBUILD=${REBUILD:-0}
BUILD_ONLY=${BUILD_ONLY:-0}
DEADLINE_S=${DEADLINE_S:-420}
if [ -n "${OUT:-}" ]; then
	OUT_DIR=${OUT_DIR:-$OUT/gpu-prefetch}
else
	OUT_DIR=${OUT_DIR:-$BUILD/gpu-prefetch-results/$(date +%Y%m%d-%H%M%S)}
fi
START=$SECONDS

# Seconds left before DEADLINE_S (0 when past it).
left() {
	local l=$((DEADLINE_S - (SECONDS - START)))
	echo $((l > 0 ? l : 0))
}

# What the build needs; says all that is missing at once.
preflight() {
	local missing=
	for t in cmake make cc pkg-config python3 timeout; do
		command -v "$t" >/dev/null || missing="$missing $t"
	done
	if command -v pkg-config >/dev/null; then
		for m in 'libfabric >= 1.17' inih hwloc libsodium jansson \
			libmicrohttpd libsystemd; do
			pkg-config --exists "$m" || missing="$missing pkg:${m%% *}"
		done
	fi
	[ -e /usr/include/numa.h ] || missing="$missing numa.h(libnuma-dev)"
	[ "$TESTS" = 1 ] && ! pkg-config --exists check 2>/dev/null &&
		missing="$missing pkg:check"
	[ -z "$missing" ] || die "cannot build here, missing:$missing"
}

mkdir -p "$OUT_DIR"
MEMD=$BUILD/memd/memd
BENCH=$BUILD/bench/gpu_prefetch
if [ "$REBUILD" = 1 ] || [ ! -x "$MEMD" ] || [ ! -x "$BENCH" ] ||
	{ [ "$TESTS" = 1 ] && [ ! -x "$BUILD/tests/test_gpu" ]; }; then
	preflight
	log "building in $BUILD (Release)"
	mkdir -p "$BUILD"
	cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
		>"$OUT_DIR/cmake.log" 2>&1 ||
		die "cmake failed (log: $OUT_DIR/cmake.log)"
	grep -E 'libpool: CUDA backend' "$OUT_DIR/cmake.log" >&2 || true
	targets="memd gpu_prefetch"
	[ "$TESTS" = 1 ] && targets="$targets test_gpu"
	# shellcheck disable=SC2086
	timeout "$(left)" make -C "$BUILD" -j"$(nproc)" $targets \
		>"$OUT_DIR/make.log" 2>&1 ||
		die "build failed or past DEADLINE_S (log: $OUT_DIR/make.log)"
	log "built in $((SECONDS - START)) s"
fi
if [ "$BUILD_ONLY" = 1 ]; then
	log "BUILD_ONLY=1: built $MEMD and $BENCH"
	exit 0
fi

bench_out gpu-prefetch

{
	echo "# run_gpu_prefetch $(date -u +%FT%TZ) git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# host cpus=$(nproc) kernel=$(uname -r) loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
	echo "# backend=$BACKEND size=$SIZE staging=$STAGING count=$COUNT reps=$REPS sweep=$SWEEP"
	if command -v nvidia-smi >/dev/null; then
		nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.width.current \
			--format=csv,noheader 2>/dev/null | sed 's/^/# gpu /' || true
	else
		echo "# gpu none (nvidia-smi not found)"
	fi
	echo "# numa nodes=$(cat /sys/devices/system/node/online 2>/dev/null || echo ?) TIDEPOOL_GPU_NODE=${TIDEPOOL_GPU_NODE:-}"
} | tee "$RAW"

# Where the GPU sits, as the driver and the kernel see it: to check the
# engine's NUMA choice (bench.log, the '# gpu_prefetch' lines) against.
{
	if command -v nvidia-smi >/dev/null; then
		nvidia-smi topo -m 2>&1 || true
		for b in $(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null); do
			d=$(echo "$b" | sed 's/^0000//' | tr 'A-F' 'a-f')
			echo "$b numa_node=$(cat "/sys/bus/pci/devices/$d/numa_node" 2>/dev/null || echo ?) local_cpulist=$(cat "/sys/bus/pci/devices/$d/local_cpulist" 2>/dev/null || echo ?)"
		done
	fi
	for n in /sys/devices/system/node/node[0-9]*; do
		[ -e "$n/cpulist" ] && echo "$(basename "$n") cpus=$(cat "$n/cpulist")"
	done
} >"$OUT_DIR/topology.txt" 2>&1 || true
if command -v lstopo-no-graphics >/dev/null; then
	lstopo-no-graphics --of xml "$OUT_DIR/host-topology.xml" 2>/dev/null || true
fi

# memd: donate the region (SIZE) plus room, in 64M slabs.
size_mib=$(python3 -c "
import re, sys
m = re.fullmatch(r'(\d+)([KMGT]?)(?:i?B)?', '$SIZE', re.I) or sys.exit('bad SIZE')
print(max(1, (int(m.group(1)) << {'': 0, 'K': 10, 'M': 20, 'G': 30, 'T': 40}[m.group(2).upper()]) >> 20))")
donate=$(((size_mib + 64 + 63) / 64 * 64 + 256))M
log "starting memd on 127.0.0.1 (donate $donate, 64M slabs)"
: >"$OUT_DIR/memd.log"
BENCH_MEMD_WAIT_S=60 bench_start_memd "$OUT_DIR/memd.log" \
	--donate "$donate" --slab-size 64M
ADDR=$MEMD_ADDR
log "memd ready at $ADDR"

run() { # staging count
	local t
	t=$(left)
	if [ "$t" -lt 20 ]; then
		log "skipping staging=$1 count=$2: DEADLINE_S is near"
		echo "# skipped staging=$1 count=$2 (deadline)" >>"$RAW"
		return 0
	fi
	log "gpu_prefetch staging=$1 count=$2 (at most $t s)"
	echo "## staging=$1 count=$2" >>"$OUT_DIR/bench.log"
	LIBPOOL_LOG=${LIBPOOL_LOG:-info} timeout "$t" \
		"$BENCH" --addr "$ADDR" --backend "$BACKEND" --device "$DEVICE" \
		--size "$SIZE" --staging "$1" --count "$2" --reps "$REPS" \
		--dir "$DIRS" 2>>"$OUT_DIR/bench.log" | tee -a "$RAW" ||
		die "gpu_prefetch failed or timed out (logs: $OUT_DIR/bench.log, $OUT_DIR/memd.log):
$(tail -n 20 "$OUT_DIR/bench.log")"
}

run "$STAGING" "$COUNT"
if [ "$SWEEP" = 1 ]; then
	for s in 1M 4M 16M; do
		for c in 2 4 8; do
			[ "$s" = "$STAGING" ] && [ "$c" = "$COUNT" ] && continue
			run "$s" "$c"
		done
	done
fi
grep -E 'gpu: (open|numa|direct)' "$OUT_DIR/bench.log" |
	sed 's/libpool\[[0-9]*\] //' | sort | uniq -c |
	sed 's/^/# /' | tee -a "$RAW" || true
echo "# loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" | tee -a "$RAW"
bench_stop_memd

if [ "$TESTS" = 1 ]; then
	if [ "$(left)" -lt 60 ]; then
		log "skipping test_gpu: DEADLINE_S is near"
	else
		log "test_gpu"
		(cd "$BUILD" && TP_SOURCE_DIR=$ROOT timeout "$(left)" \
			ctest -R 'test_gpu' --output-on-failure) 2>&1 |
			tee "$OUT_DIR/test_gpu.log" | tail -n 15
	fi
fi

# Summary: the pipeline lines against the targets.
python3 - "$RAW" <<'EOF' | tee "$OUT_DIR/summary.txt"
import sys
print()
print("%-7s %-5s %8s %5s | %9s %9s %9s | %7s %7s %7s %7s %6s" % (
    "backend", "dir", "staging", "count", "fabric", "copy", "pipeline",
    "vs_copy", "overlap", "per_rep", "limit", "pass"))
lines = [dict(w.split("=", 1) for w in l.split()[1:] if "=" in w)
         for l in open(sys.argv[1]) if l.startswith("gpu_prefetch ")]
by = {}
for kv in lines:
    by.setdefault((kv["backend"], kv["dir"], kv["staging"], kv["count"]), {})[kv["what"]] = kv
for (b, d, s, c), w in by.items():
    p = w.get("pipeline")
    if not p:
        continue
    ok_overlap = float(p["overlap"]) <= 1.1
    ok_copy = p["limit"] == "fabric" or float(p["vs_copy"]) >= 0.9
    print("%-7s %-5s %7dK %5s | %9s %9s %9s | %7s %7s %7s %7s %6s" % (
        b, d, int(s) >> 10, c, w["fabric"]["MBps"], w["copy"]["MBps"],
        p["MBps"], p["vs_copy"], p["overlap"], p["overlap_rep"],
        p["limit"], "yes" if ok_overlap and ok_copy else "no"))
print()
print("MBps = 1e6 B/s, medians. Targets: overlap = pipeline time / max(fabric,"
      " copy) <= 1.1 (per_rep: the same ratio per rep, median); vs_copy ="
      " pipeline / copy throughput >= 0.9 when the copy is the limit.")
if any(k[0] == "host" for k in by):
    print("backend=host: host memory stands in for the GPU; not GPU figures.")
EOF
log "results: $OUT_DIR (raw: $RAW) in $((SECONDS - START)) s"
