#!/usr/bin/env bash
# tidepool's main job on one machine: installs what is needed, builds,
# starts memd on loopback donating 2 GiB, and runs two real workloads
# against it: poolbench demo (writes a region, reads it back, verifies
# every byte, prints throughput), then the KV tier at work: kvbench's
# shared-prefix workload (prompts whose long prefixes repeat; KV blocks
# that do not fit the modeled GPU memory are put in the pool and fetched
# back instead of recomputed; every block verified), with the hit ratio
# and the modeled time to first token against recomputing. Stops memd at
# the end.
#
#   sudo deploy/quickstart.sh [SIZE]     (default SIZE 256M)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-256M}

if [ "$(id -u)" -eq 0 ]; then
	deploy/install-deps.sh
else
	echo "quickstart: not root; assuming the packages of" \
		"deploy/install-deps.sh are installed" >&2
fi
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
echo "quickstart: built build/release"

# shellcheck source=deploy/scratch-lib.sh
. deploy/scratch-lib.sh
scratch_start tidepool-quickstart
tmp=$SCRATCH

build/release/memd/memd --listen 127.0.0.1:0 --donate 2G \
	--slab-size 64M --set kv_share=90 --ready-file "$tmp/ready" \
	2>"$tmp/memd.log" &
SERVER_PID=$!
for _ in $(seq 1 300); do
	[ -s "$tmp/ready" ] && break
	if ! kill -0 "$SERVER_PID" 2>/dev/null; then
		echo "quickstart: memd failed to start:" >&2
		cat "$tmp/memd.log" >&2
		exit 1
	fi
	sleep 0.1
done
addr=$(head -n1 "$tmp/ready")
echo "quickstart: memd listening on $addr (log: memd.log below)"
status=0
build/release/bench/poolbench demo --addr "$addr" --size "$size" || status=$?
echo
echo "quickstart: the KV tier: 40 prompts of 30K tokens whose 28K-token"
echo "  prefixes come from a set of 20; GPU memory (modeled) holds 5 prefixes;"
echo "  prefill modeled at 10,000 tokens/s (docs/bench/kv.md)"
out=$(build/release/bench/kvbench --tier tidepool --workload shared \
	--addr "$addr" --prompts 40) || status=$?
echo "$out" | tr ' ' '\n' | grep -E '^(hit|local_hit|tier_hit|get_MBps|ttft_s|ttft_recompute_s|bad)=' |
	sed 's/^/  /' || true
echo "$out" | grep -q ' bad=0' || status=1
echo
echo "quickstart: from Python: a small torch transformer whose per-chunk K/V"
echo "  tensors go to the pool and come back for prompts sharing a prefix"
echo "  (python/examples/prefix_cache.py, docs/python.md)"
PYTHONPATH=python:build/release/python /usr/bin/python3 \
	python/examples/prefix_cache.py --addr "$addr" || status=$?
echo "quickstart: memd log:"
sed 's/^/  /' "$tmp/memd.log"
[ $status -eq 0 ] && echo "quickstart: ok" || echo "quickstart: FAILED ($status)"
exit $status
