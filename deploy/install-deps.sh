#!/usr/bin/env bash
# Installs what tidepool needs to build, test and benchmark on Debian 12.
# Used by the README's first command and by .ci/run. Idempotent; needs root.
set -euo pipefail

pkgs=(
	build-essential cmake pkg-config git
	libfabric-dev libfabric-bin
	libnuma-dev libhwloc-dev hwloc libjemalloc-dev
	libinih-dev check
	libsodium-dev libmicrohttpd-dev libsystemd-dev libjansson-dev
	libxxhash-dev
	libcurl4-openssl-dev etcd-server etcd-client
	clang libclang-rt-14-dev clang-format
	iperf3 redis-server redis-tools memcached
	groff-base iproute2 iptables procps util-linux
	valgrind sqlite3
	python3-dev python3-numpy python3-torch python3-pytest
	python3-setuptools python3-pip python3-venv
	debhelper dh-python lintian
)

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: needs root (apt-get); rerun with sudo" >&2
	exit 1
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#pkgs[@]} packages present"
	exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
