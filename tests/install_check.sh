#!/bin/sh
# SPDX-License-Identifier: MIT
# What a user gets from `cmake --install`: installs the build tree into a
# scratch prefix P and checks, against that prefix only,
#   - memd.service runs P/sbin/memd (ExecStart follows --prefix);
#   - man -M P/share/man finds memd.conf(5) in man5, and a page naming
#     each function libpool.so exports (pool_connect(3), ...);
#   - the README's C snippet (tests/install/prog.c) builds with
#     `cc prog.c $(pkg-config --cflags --libs tidepool)` and as a CMake
#     project with find_package(tidepool) + tidepool::pool, and both run
#     against the installed memd (127.0.0.1, port 0, --ready-file).
# The pkg-config program runs with LD_LIBRARY_PATH=P/lib...: tidepool.pc
# carries no rpath (libpool/CMakeLists.txt says why). The CMake one runs
# without it: CMake gives the programs it builds an rpath to an imported
# library's directory.
#
#   tests/install_check.sh BUILD_DIR SOURCE_DIR
# Exit 0, 1 (a check failed, saying which), 77 (skipped, saying why).
set -eu

build=${1:?usage: install_check.sh BUILD_DIR SOURCE_DIR}
src=${2:?usage: install_check.sh BUILD_DIR SOURCE_DIR}
build=$(cd "$build" && pwd)

if [ -n "${TP_SANITIZE:-}" ]; then
	# A sanitized libpool.so needs its runtime loaded first: a plain
	# `cc prog.c -lpool` program cannot load it.
	echo "install_check: skipped: a sanitizer build ($TP_SANITIZE)" >&2
	exit 77
fi
for t in cc pkg-config cmake; do
	if ! command -v "$t" >/dev/null; then
		echo "install_check: skipped: $t is not installed" >&2
		exit 77
	fi
done

# shellcheck source=deploy/scratch-lib.sh
. "$src/deploy/scratch-lib.sh"
scratch_start tp-install
tmp=$SCRATCH
fail() {
	echo "install_check: $*" >&2
	exit 1
}

P=$tmp/prefix
cmake --install "$build" --prefix "$P" >"$tmp/install.log" 2>&1 ||
	fail "cmake --install failed: $(cat "$tmp/install.log")"

# --- memd.service names the memd this install put in place --------------
unit=$(find "$P" -name memd.service | head -n 1)
[ -n "$unit" ] || fail "no memd.service under $P"
[ -x "$P/sbin/memd" ] || fail "no $P/sbin/memd"
grep -q "^ExecStart=$P/sbin/memd " "$unit" ||
	fail "$unit: ExecStart is not $P/sbin/memd: $(grep ^ExecStart= "$unit")"
if grep -n "sbin/memd" "$unit" | grep -v "=$P/sbin/memd " >"$tmp/stale"; then
	fail "$unit names another memd: $(cat "$tmp/stale")"
fi

# --- man pages: sections from the last extension, function names -------
[ -f "$P/share/man/man5/memd.conf.5" ] ||
	fail "memd.conf.5 is not in $P/share/man/man5: $(ls "$P/share/man")"
[ ! -e "$P/share/man/manc" ] || fail "$P/share/man/manc exists"
if command -v man >/dev/null; then
	for page in memd.conf memd poolctl libpool; do
		man -M "$P/share/man" -w "$page" >"$tmp/man" 2>&1 ||
			fail "man -M $P/share/man does not find $page: $(cat "$tmp/man")"
	done
	case $(man -M "$P/share/man" -w memd.conf) in
	"$P/share/man/man5/memd.conf.5"*) ;;
	*) fail "man memd.conf finds $(man -M "$P/share/man" -w memd.conf)" ;;
	esac
	# every function libpool.so exports has a page that names it
	fns=$(sed -n 's/^[[:space:]]*\(pool_[a-z0-9_]*\);.*/\1/p' \
		"$src/libpool/libpool.map")
	[ -n "$fns" ] || fail "no functions in $src/libpool/libpool.map"
	for fn in $fns; do
		f=$(man -M "$P/share/man" -w "$fn" 2>/dev/null) ||
			fail "man -M $P/share/man finds no page for $fn"
		case $f in "$P/share/man/man3/"*) ;; *) fail "man $fn: $f" ;; esac
		target=$f
		so=$(sed -n 's/^\.so //p' "$f")
		[ -z "$so" ] || target=$P/share/man/$so
		grep -q "$fn" "$target" || fail "$fn's page $target does not name it"
	done
	man -M "$P/share/man" pool_connect 2>/dev/null | grep -q "pool_connect" ||
		fail "man pool_connect shows no pool_connect"
else
	echo "install_check: man is not installed: checked memd.conf.5's" \
		"place only" >&2
fi

# --- a memd from the prefix ---------------------------------------------
cat >"$tmp/memd.conf" <<CONF
listen = 127.0.0.1:0
donate = 64M
slab_size = 16M
CONF
"$P/sbin/memd" -c "$tmp/memd.conf" --ready-file "$tmp/ready" \
	>"$tmp/memd.log" 2>&1 &
SERVER_PID=$!
i=0
while [ ! -s "$tmp/ready" ]; do
	kill -0 "$SERVER_PID" 2>/dev/null ||
		fail "the installed memd exited: $(cat "$tmp/memd.log")"
	i=$((i + 1))
	[ "$i" -lt 300 ] || fail "memd not ready after 30 s: $(cat "$tmp/memd.log")"
	sleep 0.1
done
addr=$(head -n 1 "$tmp/ready")

# --- pkg-config ---------------------------------------------------------
pcdir=$(dirname "$(find "$P" -name tidepool.pc | head -n 1)")
[ -f "$pcdir/tidepool.pc" ] || fail "no tidepool.pc under $P"
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs tidepool) ||
	fail "pkg-config knows no tidepool in $pcdir"
libdir=$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir tidepool)
case $libdir in "$P"/*) ;; *) fail "tidepool.pc's libdir $libdir is not under $P" ;; esac
[ "$(PKG_CONFIG_PATH=$pcdir pkg-config --modversion tidepool)" = \
	"$(sed -n 's/^project(tidepool VERSION \([0-9.]*\).*/\1/p' \
		"$src/CMakeLists.txt")" ] || fail "tidepool.pc: wrong version"
# shellcheck disable=SC2086 # flags are words
cc -o "$tmp/prog-pc" "$src/tests/install/prog.c" $flags \
	>"$tmp/cc.log" 2>&1 ||
	fail "cc prog.c \$(pkg-config --cflags --libs tidepool): $(cat "$tmp/cc.log")"
out=$(LD_LIBRARY_PATH=$libdir "$tmp/prog-pc" "$addr" 2>&1) ||
	fail "the pkg-config program failed: $out"
[ "$out" = ok ] || fail "the pkg-config program said: $out"

# --- CMake: find_package(tidepool), tidepool::pool -----------------------
cmake -S "$src/tests/install" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$P" \
	>"$tmp/cmake.log" 2>&1 ||
	fail "find_package(tidepool) project: $(cat "$tmp/cmake.log")"
cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1 ||
	fail "building the find_package(tidepool) project: $(cat "$tmp/cmake.log")"
out=$(env -u LD_LIBRARY_PATH "$tmp/cmake/prog" "$addr" 2>&1) ||
	fail "the find_package program failed: $out"
[ "$out" = ok ] || fail "the find_package program said: $out"
ldd "$tmp/cmake/prog" | grep -q "libpool.so.0 => $P/" ||
	fail "the find_package program does not use $P's libpool: $(ldd "$tmp/cmake/prog")"

echo "install_check: ok (prefix $P, memd at $addr)"
