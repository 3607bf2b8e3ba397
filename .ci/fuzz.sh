#!/bin/sh
# SPDX-License-Identifier: MIT
#
# .ci/fuzz.sh [SECONDS] - bounded libFuzzer run of the control-wire codec.
#
# Configures a clang build with -DTP_FUZZ=ON in $TP_FUZZ_BUILD_DIR (default
# build-fuzz/ at the repository root), builds fuzz_wire, and fuzzes a copy
# of tests/fuzz/corpus_wire (the checked-in seeds stay as they are) for
# SECONDS (default 60). Exits non-zero on a crash, leak, sanitizer report,
# timeout or property violation; the failing input is left in the build dir
# as crash-*/leak-*/timeout-*, ready to be added to the corpus once fixed.
set -eu

secs=${1:-60}
case $secs in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDS]" >&2
	exit 2
	;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
build=${TP_FUZZ_BUILD_DIR:-$root/build-fuzz}

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang \
	-DCMAKE_BUILD_TYPE=Debug -DTP_FUZZ=ON
cmake --build "$build" --target fuzz_wire

corpus=$build/corpus_wire
rm -rf "$corpus"
cp -R "$root/tests/fuzz/corpus_wire" "$corpus"

# -max_len leaves room for the largest valid message but ADMIN (a
# DONOR_REPORT with 1024 tenants and 256 redeemed ids, 14416 bytes) and for
# a raw struct wire_msg (14400 bytes on x86-64) and a bit more; ADMIN's
# text up to WIRE_JSON_MAX bytes is covered by test_wire. libFuzzer's own
# failure status is 77, which this project reads as "skipped": use 1.
"$build/tests/fuzz/fuzz_wire" -max_total_time="$secs" -max_len=16384 \
	-timeout=10 -rss_limit_mb=2048 -error_exitcode=1 \
	-print_final_stats=1 -artifact_prefix="$build/" "$corpus"
