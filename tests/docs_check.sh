#!/bin/sh
# SPDX-License-Identifier: MIT
# What a clone of the repository alone gives a reader (issue 17, "Found by
# a newcomer run"):
#   - README.md, docs/*.md and man/* point at nothing outside the
#     repository (no ../shared/DESIGN.md: the design a user needs is in
#     docs/design.md);
#   - every relative Markdown link in README.md and docs/*.md names a
#     file or directory of the tree;
#   - README's layout table names every public header in include/tidepool/.
#
#   tests/docs_check.sh SOURCE_DIR
# Exit 0, or 1 naming each problem.
set -eu

src=${1:?usage: docs_check.sh SOURCE_DIR}
cd "$src"
bad=0
links=$(mktemp /tmp/tp-docs-XXXXXX)
trap 'rm -f "$links"' EXIT INT TERM
problem() {
	echo "docs_check: $*" >&2
	bad=1
}

# 1. nothing outside the tree
for f in README.md docs/*.md docs/bench/*.md man/*; do
	[ -f "$f" ] || continue
	if grep -n 'shared/DESIGN\.md\|\.\./shared/' "$f" >/dev/null; then
		problem "$f names a file outside the repository:" \
			"$(grep -n 'shared/DESIGN\.md\|\.\./shared/' "$f" | head -n 3)"
	fi
done

# 2. relative Markdown links resolve: [text](path) and [text](path#anchor)
for f in README.md docs/*.md docs/bench/*.md; do
	[ -f "$f" ] || continue
	dir=$(dirname "$f")
	grep -o '\](\([^)#: ]*\)\(#[^)]*\)\?)' "$f" |
		sed 's/^](\([^)#]*\).*/\1/' | sort -u >"$links" || true
	while IFS= read -r target; do
		[ -n "$target" ] || continue
		[ -e "$dir/$target" ] ||
			problem "$f links to $target, which is not in the tree"
	done <"$links"
done

# 3. the layout table names each public header
# shellcheck disable=SC2016 # the backquotes are Markdown's
row=$(grep '^| `include/tidepool/` |' README.md || true)
[ -n "$row" ] || problem "README.md has no layout row for include/tidepool/"
for h in include/tidepool/*.h; do
	name=$(basename "$h")
	case $row in
	*"\`$name\`"*) ;;
	*) problem "README.md's layout row for include/tidepool/ omits $name" ;;
	esac
done

[ $bad -eq 0 ] || exit 1
echo "docs_check: ok"
