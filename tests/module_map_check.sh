#!/bin/sh
# SPDX-License-Identifier: MIT
# docs/design.md's module map ("### Source files") against the tree
# (issue 30): every file the map names exists, and every C source file
# under the component directories is named. Each problem is one line
# naming the file, so a merge that adds or moves files is fixed from the
# message alone.
#
#   tests/module_map_check.sh SOURCE_DIR
# Exit 0, or 1 naming each problem.
set -eu

src=${1:?usage: module_map_check.sh SOURCE_DIR}
cd "$src"
dirs="fabric numa memd libpool poolctl python"
map=docs/design.md
bad=0
problem() {
	echo "module_map_check: $*" >&2
	bad=1
}

# the files the section names, from its heading to the next heading
# shellcheck disable=SC2016 # the backquotes are Markdown's
named=$(sed -n '/^### Source files$/,/^#/p' "$map" |
	grep -o '`[A-Za-z0-9_]*/[A-Za-z0-9_./-]*\.[ch]`' |
	tr -d '`' | sort -u) || true
if [ -z "$named" ]; then
	echo "module_map_check: $map has no \"### Source files\" section" \
		"naming files" >&2
	exit 1
fi

# 1. every file named exists
for f in $named; do
	[ -f "$f" ] ||
		problem "$map names $f, which does not exist" \
			"(remove or rename its row)"
done

# 2. every source file is named
# shellcheck disable=SC2086 # dirs is a word list
for f in $(find $dirs -name build -prune -o -name '*.c' -print | sort); do
	printf '%s\n' "$named" | grep -qx "$f" ||
		problem "$f is not in $map's module map" \
			"(add a row: | \`$f\` | what it owns |)"
done

[ $bad -eq 0 ] || exit 1
