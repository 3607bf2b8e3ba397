#!/usr/bin/env bash
# tidepool's main job on one machine: installs what is needed, builds,
# starts memd on loopback donating 512 MiB, and runs a real workload
# against it (poolbench demo: writes a region, reads it back, verifies
# every byte, prints throughput). Stops memd at the end.
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

tmp=$(mktemp -d /tmp/tidepool-quickstart.XXXXXX)
memd_pid=
cleanup() {
	if [ -n "$memd_pid" ]; then
		kill -TERM "$memd_pid" 2>/dev/null || true
		wait "$memd_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

build/release/memd/memd --listen 127.0.0.1:0 --donate 512M \
	--slab-size 64M --ready-file "$tmp/ready" 2>"$tmp/memd.log" &
memd_pid=$!
for _ in $(seq 1 300); do
	[ -s "$tmp/ready" ] && break
	if ! kill -0 "$memd_pid" 2>/dev/null; then
		echo "quickstart: memd failed to start:" >&2
		cat "$tmp/memd.log" >&2
		exit 1
	fi
	sleep 0.1
done
addr=$(cat "$tmp/ready")
echo "quickstart: memd listening on $addr (log: memd.log below)"
build/release/bench/poolbench demo --addr "$addr" --size "$size"
status=$?
echo "quickstart: memd log:"
sed 's/^/  /' "$tmp/memd.log"
exit $status
