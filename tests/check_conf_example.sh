#!/bin/sh
# ctest conf_example: deploy/memd.conf.example is what
# deploy/gen-memd-conf-example.sh writes from this build's memd (so it
# cannot drift from the key table), it loads, and so does the file with
# every key uncommented (the defaults it shows are valid).
#
#   tests/check_conf_example.sh MEMD SOURCE_DIR
set -eu
memd=${1:?usage: $0 MEMD SOURCE_DIR}
src=${2:?usage: $0 MEMD SOURCE_DIR}
tmp=$(mktemp -d /tmp/tp-conf-example.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

sh "$src/deploy/gen-memd-conf-example.sh" "$memd" >"$tmp/want"
if ! diff -u "$src/deploy/memd.conf.example" "$tmp/want"; then
	echo "deploy/memd.conf.example is stale; regenerate it with" >&2
	echo "  deploy/gen-memd-conf-example.sh $memd > deploy/memd.conf.example" >&2
	exit 1
fi
"$memd" -c "$src/deploy/memd.conf.example" --check-config
sed 's/^#\([a-z_][a-z_]* =\)/\1/' "$src/deploy/memd.conf.example" >"$tmp/all.conf"
keys=$(grep -c '^[a-z_][a-z_]* =' "$tmp/all.conf")
want=$("$memd" -c /dev/null --print-config | grep -c '^[a-z_][a-z_]* =')
if [ "$keys" -ne "$want" ] || [ "$keys" -lt 20 ]; then
	echo "the example has $keys keys, memd --print-config $want" >&2
	exit 1
fi
"$memd" -c "$tmp/all.conf" --check-config
