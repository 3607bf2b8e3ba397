#!/usr/bin/env bash
# Checks the two ways a user installs the Python package (docs/python.md)
# on this machine, each followed by the API tests against the installed
# copy (not the source tree):
#
#   1. cmake --install of a build tree into a scratch prefix
#   2. pip install ./python (offline) into a venv that sees Debian's
#      torch and numpy (--system-site-packages)
#
#   deploy/check-python-install.sh [BUILD_DIR]   (default build/debug)
#
# BUILD_DIR must be built (deploy/run-tests.sh does it); its memd serves
# the tests. Exit status: 0 when both pass.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/debug}
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/tp-pyinstall.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# the vllm.general_plugins entry point vLLM loads (docs/engines.md):
# present in the install's metadata, naming tidepool's register()
entry_point() {
	local got
	got=$(cd / && PYTHONPATH=$2 "$1" -c '
from importlib.metadata import entry_points
import tidepool.connectors.vllm as tv
eps = [e for e in entry_points(group="vllm.general_plugins")
       if e.name == "tidepool"]
print(len(eps), eps and eps[0].load() is tv.register)')
	if [ "$got" != "1 True" ]; then
		echo "check-python-install: the vllm.general_plugins entry" \
			"point is missing or wrong ($got)" >&2
		exit 1
	fi
}

echo "check-python-install: cmake --install $build --prefix $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
init=$(find "$tmp/prefix" -path '*/tidepool/__init__.py' | head -1)
if [ -z "$init" ]; then
	echo "check-python-install: cmake --install put no tidepool package" \
		"under $tmp/prefix" >&2
	exit 1
fi
site=$(dirname "$(dirname "$init")")
where=$(cd / && PYTHONPATH=$site "$py" -c 'import tidepool; print(tidepool.__file__)')
case "$where" in
"$site"/*) ;;
*)
	echo "check-python-install: imported $where, not the installed copy" >&2
	exit 1
	;;
esac
PYTHONPATH=$site TIDEPOOL_INSTALLED=1 TIDEPOOL_BUILD=$build \
	"$py" -m pytest -p no:cacheprovider -q python/tests/test_api.py
entry_point "$py" "$site"

echo "check-python-install: pip install ./python into a venv"
"$py" -m venv --system-site-packages "$tmp/venv"
# a copy of the tree, so the pip build leaves nothing in the checkout
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$tmp" --one-top-level=src
(cd "$tmp" && "$tmp/venv/bin/pip" install --no-index --no-build-isolation \
	"$tmp/src/python" >"$tmp/pip.log" 2>&1) || {
	cat "$tmp/pip.log" >&2
	exit 1
}
where=$(cd / && "$tmp/venv/bin/python" -c 'import tidepool; print(tidepool.__file__)')
case "$where" in
"$tmp/venv/"*) ;;
*)
	echo "check-python-install: the venv imported $where" >&2
	exit 1
	;;
esac
TIDEPOOL_INSTALLED=1 TIDEPOOL_BUILD=$build \
	"$tmp/venv/bin/python" -m pytest -p no:cacheprovider -q \
	python/tests/test_api.py
entry_point "$tmp/venv/bin/python" ""
echo "check-python-install: both installs pass"
