#!/usr/bin/env bash
# Checks that lib/ includes only what ARCHITECTURE.md's layer list allows, so the map cannot drift
# from the code. The list is read from ARCHITECTURE.md itself (the ```layers block in
# "Modules"): one layer per line, lowest first; a module is its files' stem after "idem_", and a
# module split over several files is written with '+' (flush+session+flush_slow). A file may
# include its own module's headers and those of any module on a lower line: never a module on
# its own line or above it, so there can be no circle. Every lib/ file must belong to a module
# of the list. daemon/ may include anything of lib/; lib/ never includes daemon/. And every
# lib/*.c, lib/*.cc and lib/*.h file has at most max_lines lines (a file over that is split along a seam of
# its module, as ARCHITECTURE.md says); each file over is named with its count.
#
#   tests/check_layers.sh [SRC_DIR]      exit 0 if the code keeps to the map, 1 (saying where) if not
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
map=$src/ARCHITECTURE.md
max_lines=1000

declare -A rank=() module=()
line_no=0
while read -r line; do
	line_no=$((line_no + 1))
	for m in $line; do
		for part in ${m//+/ }; do
			[ -z "${module[$part]:-}" ] || { echo "check_layers: $part is listed twice in $map" >&2 && exit 1; }
			module[$part]=$m
		done
		rank[$m]=$line_no
	done
done < <(awk '/^```layers$/ { on = 1; next } on && /^```$/ { exit } on' "$map")
[ "$line_no" -gt 0 ] || { echo "check_layers: no \`\`\`layers block in $map" >&2 && exit 1; }

bad=0
for f in "$src"/lib/*.c "$src"/lib/*.cc "$src"/lib/*.h; do
	base=$(basename "$f")
	lines=$(wc -l <"$f")
	if [ "$lines" -gt "$max_lines" ]; then
		echo "lib/$base: $lines lines, over the budget of $max_lines lines per file of lib/" >&2
		bad=1
	fi
	stem=${base%.cc}
	stem=${stem%.[ch]}
	stem=${stem#idem_}
	stem=${stem%_int}
	own=${module[$stem]:-}
	if [ -z "$own" ]; then
		echo "lib/$base: module '$stem' is not in the layer list of ARCHITECTURE.md" >&2
		bad=1
		continue
	fi
	while read -r inc; do
		[ -n "$inc" ] || continue
		to=${inc%.h}
		to=${to#idem_}
		to=${to%_int}
		if [ ! -e "$src/lib/$inc" ]; then
			echo "lib/$base includes \"$inc\", which is not in lib/" >&2
			bad=1
			continue
		fi
		target=${module[$to]:-}
		[ -n "$target" ] || continue # reported as a file of its own
		[ "$target" != "$own" ] || continue
		if [ "${rank[$target]}" -ge "${rank[$own]}" ]; then
			echo "lib/$base (module $own, layer ${rank[$own]}) includes $inc (module $target, layer ${rank[$target]}): only lower layers may be included" >&2
			bad=1
		fi
	done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
if grep -l '#include "idemctl\|#include "idemd' "$src"/lib/*.[ch] "$src"/lib/*.cc 2>/dev/null; then
	echo "lib/ includes a header of daemon/ (above)" >&2
	bad=1
fi
[ "$bad" = 0 ] && echo "check_layers: lib/ keeps to the $line_no layers of ARCHITECTURE.md and to $max_lines lines per file"
exit "$bad"
