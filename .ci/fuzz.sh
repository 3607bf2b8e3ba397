#!/bin/sh
# SPDX-License-Identifier: MIT
#
# .ci/fuzz.sh [SECONDS] - bounded libFuzzer slice of every harness in
# tests/fuzz/ (docs/reliability.md, "Fuzzing").
#
# Configures a clang build with -DTP_FUZZ=ON in $TP_FUZZ_BUILD_DIR (default
# build-fuzz/ at the repository root) and builds the harnesses. Then, for
# each of them: replays its checked-in corpus tests/fuzz/corpus_NAME once,
# without mutation (seeds and the inputs of every crash fixed so far), and
# fuzzes a copy of it (the checked-in files stay as they are) for its
# share of SECONDS (default 160, split by weight below: the server gets
# the most). One harness at a time, one process each. Exits non-zero on a
# crash, leak, sanitizer report, timeout or property violation; the
# failing input is left in the build dir as NAME-crash-*/-leak-*/
# -timeout-*, ready to be added to the corpus once fixed.
set -eu

secs=${1:-160}
case $secs in
'' | *[!0-9]*)
	echo "usage: $0 [SECONDS]" >&2
	exit 2
	;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
build=${TP_FUZZ_BUILD_DIR:-$root/build-fuzz}

# name weight max_len [extra flags]. max_len: wire and server leave
# room for the largest valid message but ADMIN (a DONOR_REPORT with 1024
# tenants and 256 redeemed ids, 14416 bytes) and for a raw struct
# wire_msg (14400 bytes on x86-64); ADMIN's text up to WIRE_JSON_MAX
# bytes is covered by test_wire. spill: files of a few 64 KiB blocks.
harnesses='wire 3 16384
server 6 16384 -dict=tests/fuzz/server.dict
spill 2 65536
config 2 8192
registry 2 8192
admin 2 8192'
total_weight=17

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang \
	-DCMAKE_BUILD_TYPE=Debug -DTP_FUZZ=ON
targets=$(echo "$harnesses" | while read -r name rest; do
	printf ' fuzz_%s' "$name"
done)
# shellcheck disable=SC2086 # one word per target
cmake --build "$build" -j2 --target $targets

cd "$root"
echo "$harnesses" | while read -r name weight max_len extra; do
	bin=$build/tests/fuzz/fuzz_$name
	t=$((secs * weight / total_weight))
	[ "$t" -ge 1 ] || t=1
	# libFuzzer's own failure status is 77, which this project reads as
	# "skipped": use 1.
	echo "fuzz: $name: replaying tests/fuzz/corpus_$name"
	"$bin" -runs=0 -error_exitcode=1 "tests/fuzz/corpus_$name"
	corpus=$build/corpus_$name
	rm -rf "$corpus"
	cp -R "tests/fuzz/corpus_$name" "$corpus"
	echo "fuzz: $name: ${t}s"
	# shellcheck disable=SC2086 # extra is empty or one flag
	"$bin" -max_total_time="$t" -max_len="$max_len" $extra \
		-timeout=10 -rss_limit_mb=2048 -error_exitcode=1 \
		-print_final_stats=1 -artifact_prefix="$build/$name-" \
		"$corpus"
done
