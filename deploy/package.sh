#!/usr/bin/env bash
# Builds tidepool's Debian packages into dist/ (docs/packaging.md):
#
#   deploy/package.sh            tidepool-memd, libpool0, libpool-dev,
#                                python3-tidepool (+ dbgsym, .buildinfo,
#                                .changes) in dist/
#   deploy/package.sh --lintian  and runs lintian on them
#
# Runs dpkg-buildpackage -b on a copy of the tracked files (and those not
# yet committed that git does not ignore), so the checkout stays clean
# and no local build directory leaks in. Needs the Build-Depends of
# debian/control (deploy/install-deps.sh installs them); not root.
# Exit status: 0, or dpkg-buildpackage's / lintian's.
set -euo pipefail
cd "$(dirname "$0")/.."
lint=0
case ${1:-} in
--lintian) lint=1 ;;
"") ;;
*)
	echo "usage: deploy/package.sh [--lintian]" >&2
	exit 64
	;;
esac

for t in dpkg-buildpackage dh; do
	if ! command -v "$t" >/dev/null; then
		echo "package: $t not found: bash deploy/install-deps.sh" >&2
		exit 1
	fi
done
# debian/changelog and CMakeLists.txt must name the same version
want=$(sed -n 's/^project(tidepool VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
have=$(dpkg-parsechangelog -S Version)
if [ "${have%%-*}" != "$want" ]; then
	echo "package: debian/changelog is $have, CMakeLists.txt $want" >&2
	exit 1
fi

tmp=$(mktemp -d /tmp/tp-package.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tidepool-$want"
# (files deleted but not yet committed are left out)
git ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do
		[ ! -e "$f" ] || printf '%s\0' "$f"
	done | tar --null -T - -cf - | tar -xf - -C "$tmp/tidepool-$want"

echo "package: dpkg-buildpackage in $tmp/tidepool-$want"
(cd "$tmp/tidepool-$want" &&
	DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
		dpkg-buildpackage -b -us -uc) >"$tmp/build.log" 2>&1 || {
	tail -n 60 "$tmp/build.log" >&2
	echo "package: dpkg-buildpackage failed" >&2
	exit 1
}
mkdir -p dist
rm -f dist/*.deb dist/*.ddeb dist/*.buildinfo dist/*.changes
cp "$tmp"/*.deb "$tmp"/*.buildinfo "$tmp"/*.changes dist/
cp "$tmp/build.log" dist/build.log
ls -1 dist/*.deb

if [ $lint -eq 1 ]; then
	command -v lintian >/dev/null || {
		echo "package: lintian not found (apt-get install lintian)" >&2
		exit 1
	}
	lintian --info --display-info --pedantic dist/*.changes
fi
