#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# bench/run_mrcbench.sh - what the miss-ratio curves (memd/mrc.c, issue 16)
# cost the KV hot path: kvbench against a standalone memd with sampling
# on (kv_mrc_samples at its default) and off (kv_mrc_samples = 0), in one
# run, alternating (on, off, then off, on, ...: neither mode always goes
# first), REPS times each, per workload; then medians and on/off ratios of
#   throughput  MB/s and blocks/s moved (get + put, over kvbench's wall
#               time: the prefill is modeled, not slept)
#   memd CPU    utime + stime of memd (/proc/PID/stat) from ready to the
#               end of the run, per GB moved and per request (a key of an
#               exists, a get or a put)
# and, unless CALLGRIND=0, one run of each mode with memd under
# valgrind --tool=callgrind: the instructions memd executed in all and in
# mrc.c (memd_mrc_access inclusive), per request: the machine-independent
# figure (timings on a loaded 2-core VM are noisy; instruction counts are
# not), counted from memd's ready file to its exit (callgrind_control -z
# zeroes the start-up). Builds nothing.
#
# usage: bench/run_mrcbench.sh [BUILD_DIR]   (or BUILD=dir; default
#        build-bench at the repository root; a Release build)
#        bench/run_mrcbench.sh --summarize RAW.txt...
# Knobs (environment): REPS=3 CAP=2560M SLAB=64M LAYERS=1 PROMPTS=60
#   SESSIONS=16 TURNS=4 HBM=5 WORKLOADS="shared multiturn" SAMPLES=8192
#   CALLGRIND=1 CG_PROMPTS=12 CG_CAP=1G BLOCK=1048576 (kvbench --block)
#   OUT_DIR=<BUILD>/mrcbench-results/<time>
# Everything listens on 127.0.0.1; memd processes started here are killed
# on exit.
set -euo pipefail

# shellcheck source=bench/benchutil.sh
. "$(dirname "$0")/benchutil.sh"
bench_python

summarize() {
	bench_summarize_py "$@" <<'EOF'
import statistics, sys
from benchutil import load

lines, comments = load(sys.argv[1:], lambda b, kv: (
    b, kv.get("workload"), kv.get("mode")))
print("\n".join(comments))
rows = {(w, m): v for (b, w, m), v in lines.items() if b == "MRCBENCH"}
cg = {m: v[-1] for (b, w, m), v in lines.items() if b == "MRCGRIND"}

def med(w, m, f):
    v = [float(r[f]) for r in rows.get((w, m), [])]
    return statistics.median(v) if v else float("nan")

fields = [("MBps", "MB/s", ".0f"), ("ops_per_s", "blocks/s", ".0f"),
          ("req_per_s", "req/s", ".0f"),
          ("cpu_ms_per_GB", "CPU ms/GB", ".1f"),
          ("cpu_us_per_req", "CPU us/req", ".2f"),
          ("user_pct", "user %", ".1f"),
          ("hit", "hit", ".3f")]
for r in (r for v in rows.values() for r in v):
    c = float(r["cpu_s"])
    r["user_pct"] = 100 * float(r["user_s"]) / c if c > 0 else float("nan")
print(f"{'workload':<10} {'mode':<4} {'runs':>4} " +
      " ".join(f"{h:>11}" for _, h, _ in fields))
for w in sorted({k[0] for k in rows}):
    for m in ("on", "off"):
        if (w, m) not in rows:
            continue
        print(f"{w:<10} {m:<4} {len(rows[(w, m)]):>4} " +
              " ".join(f"{med(w, m, f):>11{fmt}}" for f, _, fmt in fields))
    if (w, "on") in rows and (w, "off") in rows:
        for f, h, _ in fields[:5]:
            on, off = med(w, "on", f), med(w, "off", f)
            print(f"median ratio workload={w} field={f} on/off="
                  f"{on / off:.4f} change_pct={100 * (on / off - 1):+.2f}")
if "on" in cg and "off" in cg:
    on, off = cg["on"], cg["off"]
    ron, roff = float(on["requests"]), float(off["requests"])
    ir_on, ir_off = float(on["ir_total"]), float(off["ir_total"])
    print(f"callgrind memd Ir/request on={ir_on / ron:.0f} "
          f"off={ir_off / roff:.0f} "
          f"added_pct={100 * (ir_on / ron / (ir_off / roff) - 1):+.3f}")
    share = float(on["ir_mrc"]) / ir_on
    print(f"callgrind mrc.c share of memd Ir (on) = "
          f"{100 * share:.3f} % "
          f"({float(on['ir_mrc']) / ron:.0f} Ir per request, "
          f"{on['mrc_calls']} memd_mrc_access calls)")
    # callgrind counts user-space instructions only; memd's CPU is
    # mostly the kernel's (TCP): mrc.c's share of memd's CPU is about its
    # share of user instructions times the user part of memd's CPU
    u = [float(r["user_s"]) / float(r["cpu_s"])
         for (w, m), v in rows.items() if m == "on" for r in v
         if float(r["cpu_s"]) > 0]
    if u:
        print(f"estimated mrc.c share of memd CPU (on) = "
              f"{100 * share * statistics.median(u):.3f} % "
              f"(user part of memd CPU, median: "
              f"{100 * statistics.median(u):.1f} %)")
EOF
}

bench_cli 4 29 "$@"

BUILD=${1:-${BUILD:-$ROOT/build-bench}}
bench_kvbench_knobs
SAMPLES=${SAMPLES:-8192}
BLOCK=${BLOCK:-1048576}
WORKLOADS=${WORKLOADS:-shared multiturn}
CALLGRIND=${CALLGRIND:-1}
CG_PROMPTS=${CG_PROMPTS:-12}
CG_CAP=${CG_CAP:-1G}
OUT_DIR=${OUT_DIR:-$BUILD/mrcbench-results/$(date +%Y%m%d-%H%M%S)}

MEMD=$BUILD/memd/memd
KVBENCH=$BUILD/bench/kvbench
bench_need "$MEMD" "$KVBENCH"
if [ "$CALLGRIND" = 1 ]; then
	command -v valgrind >/dev/null ||
		die "valgrind is needed for CALLGRIND=1 (or set CALLGRIND=0)"
	command -v callgrind_annotate >/dev/null ||
		die "callgrind_annotate is needed for CALLGRIND=1"
fi

bench_out mrcbench
START_TIME=$(date +%s)
BENCH_MEMD_WAIT_S=120 # memd under valgrind starts slowly

# start_memd MODE CAP [WRAPPER...]: memd with the curves on or off
start_memd() {
	local mode=$1 cap=$2 samples=$SAMPLES
	shift 2
	[ "$mode" = off ] && samples=0
	BENCH_MEMD_WRAP=("$@")
	bench_start_memd "$OUT_DIR/memd.log" --donate "$cap" \
		--slab-size "$SLAB" --set kv_share=100 \
		--set kv_mrc_samples="$samples"
	ADDR=$MEMD_ADDR
}

# memd's CPU time so far, in clock ticks: utime and stime (all threads)
cpu_ticks() {
	awk '{ print $14, $15 }' "/proc/$MEMD_PID/stat"
}

now_s() { date +%s.%N; }

{
	echo "# run_mrcbench $(date -u +%FT%TZ) git=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "# host cpus=$(nproc) kernel=$(uname -r) clk_tck=$(getconf CLK_TCK)"
	echo "# loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
	echo "# reps=$REPS cap=$CAP slab=$SLAB layers=$LAYERS prompts=$PROMPTS sessions=$SESSIONS turns=$TURNS hbm=$HBM samples=$SAMPLES block=$BLOCK"
} >>"$RAW"
TCK=$(getconf CLK_TCK)

# one_run MODE WORKLOAD REP: a fresh memd, one kvbench run, one result line
one_run() {
	local mode=$1 w=$2 rep=$3 c0 c1 t0 t1 line
	start_memd "$mode" "$CAP"
	c0=$(cpu_ticks)
	t0=$(now_s)
	line=$("$KVBENCH" --tier tidepool --addr "$ADDR" --workload "$w" \
		--layers "$LAYERS" --prompts "$PROMPTS" --sessions "$SESSIONS" \
		--turns "$TURNS" --hbm-prefixes "$HBM" --seed "$rep" \
		--block "$BLOCK")
	t1=$(now_s)
	c1=$(cpu_ticks)
	bench_stop_memd
	echo "$line" >>"$OUT_DIR/kvbench.txt"
	"$PY" - "$mode" "$w" "$rep" "$c0" "$c1" "$TCK" "$t0" "$t1" "$line" \
		<<'EOF' | tee -a "$RAW"
import sys
mode, w, rep, c0, c1, tck, t0, t1, line = sys.argv[1:]
kv = dict(x.split("=", 1) for x in line.split()[1:])
wall = float(t1) - float(t0)
u0, s0 = (float(v) for v in c0.split())
u1, s1 = (float(v) for v in c1.split())
user, sys_ = (u1 - u0) / float(tck), (s1 - s0) / float(tck)
cpu = user + sys_
moved = float(kv["get_bytes"]) + float(kv["put_bytes"])
blocks = moved / float(kv.get("block", 1 << 20))
# requests memd served: every block got or put, and every chunk key an
# exists asked for (one key a chunk: the prompt's chunks minus the local
# HBM hits, which never reach the tier)
chunks = float(kv["chunks"])
asked = chunks * (1 - float(kv["local_hit"]))
req = blocks + asked
print(f"MRCBENCH mode={mode} workload={w} rep={rep} wall_s={wall:.3f} "
      f"cpu_s={cpu:.3f} user_s={user:.3f} sys_s={sys_:.3f} "
      f"bytes={moved:.0f} blocks={blocks:.0f} "
      f"requests={req:.0f} MBps={moved / wall / 1e6:.1f} "
      f"ops_per_s={blocks / wall:.1f} req_per_s={req / wall:.1f} "
      f"cpu_ms_per_GB={1e3 * cpu / (moved / 1e9):.2f} "
      f"cpu_us_per_req={1e6 * cpu / req:.3f} hit={kv['hit']} "
      f"bad={kv['bad']}")
EOF
}

for rep in $(seq "$REPS"); do
	for w in $WORKLOADS; do
		order="on off"
		[ $((rep % 2)) = 0 ] && order="off on"
		for mode in $order; do
			log "rep $rep/$REPS $w: sampling $mode"
			one_run "$mode" "$w" "$rep"
		done
	done
done

if [ "$CALLGRIND" = 1 ]; then
	w=${WORKLOADS%% *}
	for mode in on off; do
		log "callgrind $w: sampling $mode ($CG_PROMPTS prompts)"
		out=$OUT_DIR/callgrind.$mode.out
		start_memd "$mode" "$CG_CAP" valgrind --tool=callgrind \
			--callgrind-out-file="$out" --dump-instr=no
		# count the run, not memd's start-up (donation, config)
		callgrind_control -z "$MEMD_PID" >/dev/null
		line=$("$KVBENCH" --tier tidepool --addr "$ADDR" --workload "$w" \
			--layers "$LAYERS" --prompts "$CG_PROMPTS" \
			--sessions "$SESSIONS" --turns "$TURNS" \
			--hbm-prefixes "$HBM" --seed 1 --block "$BLOCK")
		bench_stop_memd
		callgrind_annotate --inclusive=yes "$out" \
			>"$OUT_DIR/callgrind.$mode.txt" 2>/dev/null
		"$PY" - "$mode" "$w" "$line" "$OUT_DIR/callgrind.$mode.txt" \
			"$out" <<'EOF' | tee -a "$RAW"
import re, sys
mode, w, line, ann, raw = sys.argv[1:]
kv = dict(x.split("=", 1) for x in line.split()[1:])
total = mrc = 0
for l in open(ann):
    m = re.match(r"\s*([\d,]+)\s+(\([^)]*\)\s+)?(\S.*)$", l)
    if not m:
        continue
    n = int(m.group(1).replace(",", ""))
    if "PROGRAM TOTALS" in l:
        total = n
    elif re.search(r"[:\s]memd_mrc_access\b", m.group(3)) and not mrc:
        mrc = n
# calls of memd_mrc_access: the "calls=" line after each "cfn=" to it
calls, fn_id, to_mrc = 0, None, False
for l in open(raw):
    l = l.strip()
    m = re.match(r"c?fn=\((\d+)\)( (\S+))?$", l)
    if m and m.group(3) == "memd_mrc_access":
        fn_id = m.group(1)
    if l.startswith("cfn="):
        to_mrc = m is not None and m.group(1) == fn_id
    elif l.startswith("calls=") and to_mrc:
        calls += int(l.split()[0].split("=")[1])
        to_mrc = False
moved = float(kv["get_bytes"]) + float(kv["put_bytes"])
req = moved / float(kv.get("block", 1 << 20)) + float(kv["chunks"]) * (1 - float(kv["local_hit"]))
print(f"MRCGRIND mode={mode} workload={w} ir_total={total} ir_mrc={mrc} "
      f"mrc_calls={calls} requests={req:.0f} bytes={moved:.0f}")
EOF
	done
fi
bench_finish
