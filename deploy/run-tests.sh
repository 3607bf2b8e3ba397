#!/usr/bin/env bash
# Builds tidepool and runs the whole test suite: ctest (C unit and
# integration tests), then, in the debug and release configurations, the
# Python package's pytest suite (python/tests, with Debian's
# /usr/bin/python3, against the build tree's extension and memd).
#
#   deploy/run-tests.sh [debug|release|asan|tsan]   (default: debug)
#
# The randomized chaos slice is left to .ci/run (it runs once, in the debug
# build): ctest -L chaos. Installs missing Debian packages first when run as root. Build trees go
# to build/<config>. Exit status: 0 when both suites pass.
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
rc=0
# The chaos slice (label "chaos", tests/chaos) runs once, from .ci/run.
(cd "$dir" && ctest --output-on-failure -j"${TP_TEST_JOBS:-2}" -LE chaos) ||
	rc=$?

# The Python package (docs/python.md). Under ASan the interpreter (not
# instrumented) gets the sanitizer runtimes preloaded; leaks are not
# checked (CPython keeps its objects at exit). Not under TSan.
py=${TP_PYTHON:-/usr/bin/python3}
pyenv=()
case "$cfg" in
asan)
	pyenv=("LD_PRELOAD=$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)"
		"ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
	;&
debug | release)
	echo "run-tests: python/tests with $py"
	env "${pyenv[@]}" TIDEPOOL_BUILD="$dir" "$py" -m pytest \
		-p no:cacheprovider -q python/tests || rc=$?
	;;
esac
exit $rc
