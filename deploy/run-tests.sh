#!/usr/bin/env bash
# Builds tidepool and runs the whole test suite (ctest).
#
#   deploy/run-tests.sh [debug|release|asan|tsan]   (default: debug)
#
# Installs missing Debian packages first when run as root. Build trees go
# to build/<config>. Exit status: ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."

cfg=${1:-debug}
case "$cfg" in
debug) args=(-DCMAKE_BUILD_TYPE=Debug) ;;
release) args=(-DCMAKE_BUILD_TYPE=Release) ;;
asan) args=(-DCMAKE_BUILD_TYPE=Debug -DTP_SANITIZE=address) ;;
tsan) args=(-DCMAKE_BUILD_TYPE=Debug -DTP_SANITIZE=thread) ;;
*)
	echo "usage: $0 [debug|release|asan|tsan]" >&2
	exit 64
	;;
esac

if [ "$(id -u)" -eq 0 ]; then
	deploy/install-deps.sh
fi
dir=build/$cfg
cmake -S . -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
cd "$dir"
ctest --output-on-failure -j"${TP_TEST_JOBS:-2}"
