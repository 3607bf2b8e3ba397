#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What a Debian user gets from the packages (docs/packaging.md): builds
# them with deploy/package.sh, installs them with apt, and checks against
# the installed files only (/usr, /etc, /lib; never a tree's build or an
# earlier `cmake --install` in /usr/local):
#   - lintian reports no error or warning (when lintian is installed);
#   - memd.service passes systemd-analyze verify (when available);
#   - the user tidepool exists, /var/lib/tidepool{,/spill} are 0700 and
#     its own;
#   - /usr/sbin/memd runs as tidepool with the installed config: under
#     systemd when systemd is PID 1 (a runtime drop-in points it at a free
#     port and a small donation), else started by hand as the unit would:
#     setpriv to tidepool with CAP_IPC_LOCK ambient and no memlock limit;
#   - the README's C snippet (tests/install/prog.c) builds with `cc prog.c
#     $(pkg-config --cflags --libs tidepool)` and as a CMake project with
#     find_package(tidepool), both linked to /usr's libpool.so.0, and both
#     run against that memd; /usr/bin/python3 imports tidepool from
#     /usr/lib/python3/dist-packages and round-trips a region;
#   - apt-get purge leaves none of the packages' files, /etc/tidepool or
#     /var/lib/tidepool behind. The user tidepool stays (Debian keeps
#     system users on purge); this test deletes it again if it made it.
#
#   tests/package_check.sh     (as root; 1 to 4 minutes on 2 cores, the
#                               package build most of it)
# Set TP_PACKAGE_DIST=DIR to install DIR/*.deb instead of building.
# Exit 0, 1 (a check failed, saying which), 77 (skipped, saying why).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
start=$SECONDS

skip() {
	echo "package_check: skipped: $*" >&2
	exit 77
}
fail() {
	echo "package_check: FAIL: $*" >&2
	exit 1
}
say() { echo "package_check: [$((SECONDS - start))s] $*"; }

[ "$(id -u)" -eq 0 ] || skip "needs root (apt-get install, a system user)"
for t in apt-get dpkg-buildpackage dh cc cmake pkg-config setpriv; do
	command -v "$t" >/dev/null || skip "$t is not installed"
done
pkgs=(tidepool-memd libpool0 libpool-dev python3-tidepool)
for p in "${pkgs[@]}"; do
	if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = \
		"install ok installed" ]; then
		skip "$p is installed already; this test installs and purges it"
	fi
done

tmp=$(mktemp -d /tmp/tp-pkgcheck.XXXXXX)
chmod 0755 "$tmp" # memd (user tidepool) writes its ready file below
installed=0
user_made=0
memd_pid=
notify_pid=
systemd=0
getent passwd tidepool >/dev/null || user_made=1
cleanup() {
	set +e
	if [ $systemd -eq 1 ]; then
		systemctl stop memd >/dev/null 2>&1
		rm -rf /run/systemd/system/memd.service.d
		systemctl daemon-reload
	fi
	if [ -n "$memd_pid" ]; then
		kill -TERM "$memd_pid" 2>/dev/null
		wait "$memd_pid" 2>/dev/null
	fi
	[ -z "$notify_pid" ] || kill "$notify_pid" 2>/dev/null
	if [ $installed -eq 1 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get purge -y -q \
			"${allpkgs[@]}" >>"$tmp/apt.log" 2>&1
	fi
	if [ $user_made -eq 1 ] && getent passwd tidepool >/dev/null; then
		deluser --system --quiet tidepool >/dev/null 2>&1 ||
			userdel tidepool
		getent group tidepool >/dev/null && groupdel tidepool
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- build ----------------------------------------------------------------
dist=${TP_PACKAGE_DIST:-}
if [ -z "$dist" ]; then
	say "building the packages: deploy/package.sh"
	bash deploy/package.sh >"$tmp/package.log" 2>&1 ||
		fail "deploy/package.sh: $(tail -n 40 "$tmp/package.log")"
	dist=$src/dist
fi
dist=$(cd "$dist" && pwd) # apt-get takes ./x.deb or /x.deb, not dist/x.deb
debs=("$dist"/*.deb)
[ -e "${debs[0]}" ] || fail "no .deb in $dist"
for p in "${pkgs[@]}"; do
	ls "$dist/${p}_"*.deb >/dev/null 2>&1 || fail "no $p package in $dist"
done
allpkgs=()
for d in "${debs[@]}"; do
	allpkgs+=("$(dpkg-deb -f "$d" Package)")
done
if command -v lintian >/dev/null; then
	say "lintian"
	lintian --pedantic "$dist"/*.changes >"$tmp/lintian.log" 2>&1 || true
	if grep -E '^[EW]:' "$tmp/lintian.log"; then
		fail "lintian reports errors or warnings (docs/packaging.md)"
	fi
else
	say "lintian is not installed: not run"
fi

# --- install --------------------------------------------------------------
say "apt-get install ${allpkgs[*]}"
installed=1
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	"${debs[@]}" >"$tmp/apt.log" 2>&1 ||
	fail "apt-get install: $(tail -n 30 "$tmp/apt.log")"
for p in "${allpkgs[@]}"; do
	dpkg-query -L "$p" >>"$tmp/files"
done

arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$arch
memd=/usr/sbin/memd
unit=/lib/systemd/system/memd.service
for f in "$memd" /usr/sbin/poolctl "$unit" /etc/tidepool/memd.conf \
	"$libdir/libpool.so.0" "$libdir/libpool-preload.so" \
	"$libdir/libpool.so" "$libdir/pkgconfig/tidepool.pc" \
	"$libdir/cmake/tidepool/tidepoolConfig.cmake" \
	/usr/include/tidepool/pool.h /usr/share/man/man8/memd.8.gz \
	/usr/share/man/man5/memd.conf.5.gz /usr/share/man/man3/pool_connect.3.gz \
	/usr/lib/python3/dist-packages/tidepool/__init__.py; do
	[ -e "$f" ] || fail "$f is not installed"
done
# the example local-pool.sh finds the helper it sources beside it (its
# number check is the helper's)
ex=/usr/share/doc/tidepool-memd/examples
st=0
bash "$ex/local-pool.sh" -n x >"$tmp/ex.log" 2>&1 || st=$?
if [ $st -ne 64 ] || ! grep -q '^local-pool: -n takes a number' "$tmp/ex.log"; then
	fail "$ex/local-pool.sh -n x: exit $st: $(cat "$tmp/ex.log")"
fi
# (outputs captured first: grep -q ending a pipe early is a SIGPIPE,
# which pipefail reports as a failure)
objdump -p "$libdir/libpool.so.0" >"$tmp/dyn"
objdump -T "$libdir/libpool.so.0" >"$tmp/syms"
grep -q 'SONAME *libpool.so.0$' "$tmp/dyn" ||
	fail "libpool.so.0 has no SONAME libpool.so.0"
grep -q 'LIBPOOL_0.1 *pool_connect$' "$tmp/syms" ||
	fail "libpool.so.0 does not export pool_connect@LIBPOOL_0.1"
# the KV options grew in 0.2: the new default and the 0.1 compatibility
# symbol (libpool/kv.c, "ABI")
grep -q ' LIBPOOL_0.2 *pool_kv_open$' "$tmp/syms" ||
	fail "libpool.so.0 does not export pool_kv_open@@LIBPOOL_0.2"
grep -q '(LIBPOOL_0.1) *pool_kv_open$' "$tmp/syms" ||
	fail "libpool.so.0 does not keep pool_kv_open@LIBPOOL_0.1"
# 0.3 added pool_kv_clear
grep -q ' LIBPOOL_0.3 *pool_kv_clear$' "$tmp/syms" ||
	fail "libpool.so.0 does not export pool_kv_clear@@LIBPOOL_0.3"
# 0.4 added pool_kv_get_to
grep -q ' LIBPOOL_0.4 *pool_kv_get_to$' "$tmp/syms" ||
	fail "libpool.so.0 does not export pool_kv_get_to@@LIBPOOL_0.4"
if awk '$4 != "*UND*"' "$tmp/syms" |
	grep -E ' (fab|wire|place|memd|tp)_' >"$tmp/leak"; then
	fail "libpool.so.0 exports internal symbols: $(head -n 5 "$tmp/leak")"
fi

# --- the user and its directories -----------------------------------------
getent passwd tidepool >/dev/null || fail "no user tidepool"
[ "$(getent passwd tidepool | cut -d: -f7)" = /usr/sbin/nologin ] ||
	fail "tidepool has a login shell: $(getent passwd tidepool)"
for d in /var/lib/tidepool /var/lib/tidepool/spill; do
	[ "$(stat -c '%U:%G %a' "$d")" = "tidepool:tidepool 700" ] ||
		fail "$d is $(stat -c '%U:%G %a' "$d"), not tidepool:tidepool 700"
done
if command -v systemd-analyze >/dev/null; then
	# no unit dependencies loaded (a container may lack them)
	systemd-analyze verify --recursive-errors=no "$unit" \
		>"$tmp/verify" 2>&1 || fail "systemd-analyze verify: $(cat "$tmp/verify")"
	[ ! -s "$tmp/verify" ] || fail "systemd-analyze verify: $(cat "$tmp/verify")"
	say "systemd-analyze verify $unit: clean"
fi
grep -q '^User=tidepool$' "$unit" || fail "$unit: no User=tidepool"
grep -q '^AmbientCapabilities=CAP_IPC_LOCK$' "$unit" ||
	fail "$unit: no AmbientCapabilities=CAP_IPC_LOCK"

# --- memd as tidepool with the installed config ---------------------------
runuser -u tidepool -- "$memd" -c /etc/tidepool/memd.conf --check-config \
	>"$tmp/check" 2>&1 || fail "memd --check-config: $(cat "$tmp/check")"
# a free port and 64 MiB instead of 127.0.0.1:7470 and 1 GiB
overrides=(--listen 127.0.0.1:0 --donate 64M --slab-size 16M
	--set kv_spill_dir=/var/lib/tidepool/spill --set kv_spill_size=64M)
if [ -d /run/systemd/system ]; then # sd_booted(3)
	systemd=1
	ready=/var/lib/tidepool/ready
	say "systemd is PID 1: systemctl start memd (runtime drop-in)"
	mkdir -p /run/systemd/system/memd.service.d
	cat >/run/systemd/system/memd.service.d/package-check.conf <<EOF
[Service]
ExecStart=
ExecStart=$memd -c /etc/tidepool/memd.conf ${overrides[*]} --ready-file $ready
EOF
	systemctl daemon-reload
	systemctl start memd || fail "systemctl start memd: $(journalctl -u memd -n 30 --no-pager)"
	pid=$(systemctl show -P MainPID memd)
else
	ready=/var/lib/tidepool/ready
	say "no systemd: setpriv as tidepool with CAP_IPC_LOCK, in the" \
		"unit's file system view, as the unit would"
	# what the unit sets: User=, Group=, AmbientCapabilities=,
	# LimitMEMLOCK=infinity, NoNewPrivileges=, UMask=
	# A container without CAP_SYS_RESOURCE cannot raise the limit:
	# CAP_IPC_LOCK alone lets memd lock past it.
	limit=(prlimit --memlock=unlimited:unlimited --)
	if ! "${limit[@]}" true 2>/dev/null; then
		say "cannot lift RLIMIT_MEMLOCK here (no CAP_SYS_RESOURCE):" \
			"CAP_IPC_LOCK alone"
		limit=()
	fi
	# Type=notify: memd's READY=1 on $NOTIFY_SOCKET (a datagram socket
	# in the state directory, where the namespace below leaves it
	# writable)
	notify=/var/lib/tidepool/notify.sock
	/usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("bound", flush=True)
s.settimeout(60)
while True:
    m = s.recv(4096).decode()
    print(m.replace("\n", " "), flush=True)
    if "READY=1" in m.split("\n"):
        break
' "$notify" >"$tmp/notify" 2>&1 &
	notify_pid=$!
	for _ in $(seq 1 100); do
		[ -S "$notify" ] && break
		sleep 0.1
	done
	[ -S "$notify" ] || fail "no notify socket: $(cat "$tmp/notify")"
	chown tidepool: "$notify"
	# ProtectSystem=strict + ReadWritePaths=/var/lib/tidepool, PrivateTmp=,
	# ProtectHome=: a private mount namespace where every mount but /proc,
	# /sys and /dev is read-only, the state directory a writable bind of
	# itself, /tmp and /var/tmp empty tmpfs, /home and /root empty and
	# read-only. It fails (and so does the test) when a mount cannot be
	# made read-only.
	# shellcheck disable=SC2016 # the script is bash -c's
	ns='set -e
mount --bind /var/lib/tidepool /var/lib/tidepool
findmnt -rn -o TARGET | while read -r m; do
	m=$(printf "%b" "$m")
	case $m in /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | /var/lib/tidepool) continue ;; esac
	mount -o remount,bind,ro "$m"
done
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
for h in /home /root; do mount -t tmpfs -o ro,mode=0755 tmpfs "$h"; done
if touch /usr/.tp-rw-check 2>/dev/null; then echo "/usr is writable" >&2; exit 1; fi
exec "$@"'
	(umask 0077 && NOTIFY_SOCKET=$notify exec \
		unshare -m --propagation private -- bash -c "$ns" bash \
		"${limit[@]}" \
		setpriv --reuid tidepool --regid tidepool --init-groups \
		--inh-caps -all,+ipc_lock --ambient-caps +ipc_lock \
		--bounding-set -all,+ipc_lock --no-new-privs -- \
		"$memd" -c /etc/tidepool/memd.conf "${overrides[@]}" \
		--ready-file "$ready") >"$tmp/memd.log" 2>&1 &
	memd_pid=$!
	pid=$memd_pid
fi
i=0
while [ ! -s "$ready" ]; do
	kill -0 "$pid" 2>/dev/null ||
		fail "memd exited: $(cat "$tmp/memd.log" 2>/dev/null)"
	i=$((i + 1))
	[ $i -lt 300 ] || fail "memd not ready after 30 s: $(cat "$tmp/memd.log" 2>/dev/null)"
	sleep 0.1
done
addr=$(head -n 1 "$ready")
[ "$(ps -o user= -p "$pid")" = tidepool ] ||
	fail "memd runs as $(ps -o user= -p "$pid"), not tidepool"
[ "$(readlink "/proc/$pid/exe")" = "$memd" ] ||
	fail "memd is $(readlink "/proc/$pid/exe"), not $memd"
say "memd $memd (pid $pid, user tidepool) at $addr"
if [ $systemd -eq 0 ]; then
	wait "$notify_pid" || fail "no READY=1 on NOTIFY_SOCKET: $(cat "$tmp/notify")"
	notify_pid=
	grep -q "READY=1" "$tmp/notify" || fail "notify: $(cat "$tmp/notify")"
	# what the namespace gave memd: / read-only, the state directory
	# not, its own /tmp
	for m in / /var/lib/tidepool /tmp; do
		o=$(findmnt -N "$pid" -rn -o FSTYPE,OPTIONS -T "$m")
		case $m,$o in
		/,*\ ro,* | /var/lib/tidepool,*\ rw,* | /tmp,tmpfs\ rw,*) ;;
		*) fail "memd sees $m mounted $o" ;;
		esac
	done
	say "memd said READY=1 on NOTIFY_SOCKET; it saw / read-only," \
		"/var/lib/tidepool writable, private /tmp"
fi

# --- the README's snippet with pkg-config, then CMake ---------------------
# /usr/local's pkg-config and CMake directories and ld.so's /usr/local/lib
# come first: look only in /usr, then check what was found.
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:/usr/lib/pkgconfig:/usr/share/pkgconfig
[ "$(pkg-config --variable=libdir tidepool)" = "$libdir" ] ||
	fail "tidepool.pc's libdir is $(pkg-config --variable=libdir tidepool)"
[ "$(pkg-config --modversion tidepool)" = \
	"$(sed -n 's/^project(tidepool VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)" ] ||
	fail "tidepool.pc: wrong version $(pkg-config --modversion tidepool)"
# shellcheck disable=SC2046 # flags are words
cc -o "$tmp/prog-pc" tests/install/prog.c $(pkg-config --cflags --libs tidepool) \
	>"$tmp/cc.log" 2>&1 ||
	fail "cc prog.c \$(pkg-config --cflags --libs tidepool): $(cat "$tmp/cc.log")"
cmake -S tests/install -B "$tmp/cmake" \
	-Dtidepool_DIR="$libdir/cmake/tidepool" -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF \
	>"$tmp/cmake.log" 2>&1 || fail "find_package(tidepool): $(cat "$tmp/cmake.log")"
cmake --build "$tmp/cmake" >>"$tmp/cmake.log" 2>&1 ||
	fail "building the find_package(tidepool) project: $(cat "$tmp/cmake.log")"
# an earlier `cmake --install` in /usr/local/lib would win in ld.so's
# cache: then the programs are pointed at /usr's copy and a note says so
ldpath=
if grep -q "libpool.so.0 => /usr/local/" <<<"$(ldd "$tmp/prog-pc")"; then
	say "NOTE: ld.so finds /usr/local's libpool.so.0 first (a cmake --install);" \
		"running with LD_LIBRARY_PATH=$libdir"
	ldpath=$libdir
fi
for prog in "$tmp/prog-pc" "$tmp/cmake/prog"; do
	ldd_out=$(LD_LIBRARY_PATH=$ldpath ldd "$prog")
	grep -Eq "libpool.so.0 => ($libdir|/lib/$arch)/libpool.so.0 " <<<"$ldd_out" ||
		fail "$prog does not use $libdir/libpool.so.0: $ldd_out"
	out=$(LD_LIBRARY_PATH=$ldpath "$prog" "$addr" 2>&1) || fail "$prog: $out"
	[ "$out" = ok ] || fail "$prog said: $out"
done
say "the README's snippet: pkg-config and find_package builds ran"

# --- Python: /usr/bin/python3, the package in dist-packages ---------------
site=/usr/lib/python3/dist-packages
out=$(cd / && LD_LIBRARY_PATH=$ldpath /usr/bin/python3 -c "
import sys
sys.path.insert(0, '$site')  # ahead of /usr/local's dist-packages
import tidepool
assert tidepool.__file__.startswith('$site/'), tidepool.__file__
with tidepool.Pool('$addr') as p:
    r = p.alloc(1 << 20)
    src = bytes((i * 131) & 0xff for i in range(4096))
    r.write(4096, src)
    assert r.read(4096, len(src)) == src
print('ok', tidepool.__file__)
" 2>&1) || fail "python3: $out"
case $out in "ok $site/tidepool/"*) ;; *) fail "python3 said: $out" ;; esac
say "python3 imported $site/tidepool and round-tripped a region"

# --- stop, purge, nothing left --------------------------------------------
if [ $systemd -eq 1 ]; then
	systemctl stop memd
	rm -rf /run/systemd/system/memd.service.d
	systemctl daemon-reload
	systemd=0
else
	kill -TERM "$memd_pid"
	st=0
	wait "$memd_pid" || st=$?
	memd_pid=
	[ $st -eq 0 ] || fail "memd exited $st on SIGTERM: $(cat "$tmp/memd.log")"
fi
say "apt-get purge"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${allpkgs[@]}" \
	>>"$tmp/apt.log" 2>&1 || fail "apt-get purge: $(tail -n 30 "$tmp/apt.log")"
installed=0
for p in "${allpkgs[@]}"; do
	if [ -n "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" ]; then
		fail "$p is still known to dpkg: $(dpkg-query -W -f='${Status}' "$p")"
	fi
done
: >"$tmp/left"
while IFS= read -r f; do
	case $f in "" | /.) continue ;; esac
	# directories stay when another package owns them too (/lib is a
	# link to one on a merged-/usr system)
	[ ! -d "$f" ] || continue
	if [ -L "$f" ] || [ -e "$f" ]; then
		echo "$f" >>"$tmp/left"
	fi
done <"$tmp/files"
for f in /etc/tidepool /var/lib/tidepool \
	/usr/lib/python3/dist-packages/tidepool \
	/var/lib/systemd/deb-systemd-helper-enabled/memd.service.dsh-also; do
	[ ! -e "$f" ] || echo "$f" >>"$tmp/left"
done
[ ! -s "$tmp/left" ] || fail "left behind after purge: $(sort -u "$tmp/left")"
getent passwd tidepool >/dev/null ||
	fail "purge removed the user tidepool (Debian keeps system users)"
say "ok: purged, nothing left behind (the user tidepool stays, as Debian" \
	"keeps system users)"
