#!/usr/bin/env bash
# Checks the manual pages (doc/*.[58]) against the code, so the reference cannot drift from it:
#
#  - each page renders with no warning from man/groff (man --warnings);
#  - idemd.yaml(5)'s KEYS section names every key the configuration accepts and no other: the
#    keys are those idemd itself lists from its section tables (idemd --dump-keys; a section's
#    own name, such as "routes[].handler", is not a key to document), the documented ones the
#    tags (.TP) of KEYS;
#  - idemd.yaml(5)'s FIELDS names every field kind lib/idem_field.c reads (its table of names and
#    the prefixes it parses);
#  - idemctl(8)'s COMMANDS section has an entry for every command of idemctl's dispatch table
#    (daemon/idemctl.c), and its EXIT STATUS one for every exit status of enum idem_exit
#    (lib/idem_common.h); idemd(8)'s EXIT STATUS one for each status idemd itself returns.
#
#   tests/check_docs.sh [IDEMD]   exit 0 if the pages agree with the code, 1 (saying where) if not
#
# Without IDEMD, idemd is built in build/debug (the build run-all.sh makes next).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
idemd=${1:-}
if [ -z "$idemd" ]; then
	cmake -S "$src" -B "$src/build/debug" -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build "$src/build/debug" -j"${IDEM_JOBS:-2}" --target idemd >/dev/null
	idemd=$src/build/debug/idemd
fi
doc=$src/doc
fail=0
problem() {
	echo "check_docs: $*" >&2
	fail=1
}

# The tags of the .TP entries of section NAME of a page, fonts and escapes removed, one a line.
tags() { # tags PAGE SECTION
	awk -v sec="$2" '
		/^\.SH/ { s = $0; sub(/^\.SH +/, "", s); gsub(/"/, "", s); on = (s == sec); next }
		on && /^\.TP/ { want = 1; next }
		on && want { print; want = 0 }' "$1" |
		sed -e 's/\\f[BIRP]//g' -e 's/\\-/-/g' -e 's/\\e/\\/g'
}

for page in "$doc"/*.[0-9]; do
	out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null) ||
		problem "${page#"$src"/}: man failed"
	[ -z "$out" ] || problem "${page#"$src"/}: warnings:" $'\n'"$out"
done

# Keys: the code's leaves against idemd.yaml(5)'s KEYS.
code_keys=$("$idemd" --dump-keys | awk '{ k[NR] = $0 } END {
	for (i = 1; i <= NR; i++) { p = k[i] "."; q = k[i] "[]."; leaf = 1
		for (j = 1; j <= NR; j++)
			if (index(k[j], p) == 1 || index(k[j], q) == 1) leaf = 0
		if (leaf) print k[i] } }' | sort -u)
[ -n "$code_keys" ] || problem "'$idemd --dump-keys' listed no key"
doc_keys=$(tags "$doc/idemd.yaml.5" KEYS | sort -u)
while read -r k; do
	problem "idemd.yaml(5) does not document the key '$k' in KEYS"
done < <(comm -23 <(echo "$code_keys") <(echo "$doc_keys"))
while read -r k; do
	problem "idemd.yaml(5) documents '$k' in KEYS, which is not a key idemd accepts"
done < <(comm -13 <(echo "$code_keys") <(echo "$doc_keys"))

# Field kinds: the names of lib/idem_field.c's table and the prefixes it parses (json:, avro:,
# header:...) against the tags of idemd.yaml(5)'s FIELDS.
fields=$({
	awk '/^} field_names\[\] = \{/ { exit } /field_names\[\] = \{/ { on = 1; next } on' \
		"$src/lib/idem_field.c" | grep -o '{ "[a-z_]*"' | tr -d '{" '
	grep -o 'strncmp(s, "[a-z-]*:"' "$src/lib/idem_field.c" | grep -o '"[a-z-]*:"' | tr -d '"'
} | sort -u)
[ -n "$fields" ] || problem "no field kind found in lib/idem_field.c"
doc_fields=$(tags "$doc/idemd.yaml.5" FIELDS | tr ',' '\n' | sed -e 's/^ *//' -e 's/:.*/:/' -e 's/[/$].*//' | sort -u)
for f in $fields; do
	grep -qx -- "$f" <<<"$doc_fields" || problem "idemd.yaml(5) does not document the field '$f' in FIELDS"
done

# idemctl's commands: the dispatch table's names against COMMANDS' tags (first word).
cmds=$(awk '/^} commands\[\] = \{/ { on = 1; next } on && /^};/ { exit } on' "$src/daemon/idemctl.c" |
	grep -o '{ "[a-z-]*"' | tr -d '{" ')
[ -n "$cmds" ] || problem "no command found in daemon/idemctl.c's commands[]"
doc_cmds=$(tags "$doc/idemctl.8" COMMANDS | awk '{ print $1 }' | sort -u)
for c in $cmds; do
	grep -qx "$c" <<<"$doc_cmds" || problem "idemctl(8) does not document the command '$c' in COMMANDS"
done
for c in $doc_cmds; do
	grep -qx "$c" <<<"$cmds" || problem "idemctl(8) documents '$c' in COMMANDS, which idemctl does not have"
done

# Exit statuses: enum idem_exit's values in idemctl(8); idemd's own in idemd(8).
codes=$(awk '/^enum idem_exit \{/ { on = 1; next } on && /^\};/ { exit } on' "$src/lib/idem_common.h" |
	grep -o '= [0-9]*' | tr -d '= ' | sort -un)
[ -n "$codes" ] || problem "no exit status found in lib/idem_common.h's enum idem_exit"
doc_codes=$(tags "$doc/idemctl.8" "EXIT STATUS" | sort -un)
[ "$codes" = "$doc_codes" ] ||
	problem "idemctl(8) EXIT STATUS lists" $doc_codes "but enum idem_exit has" $codes
idemd_codes=$(grep -o 'IDEM_EXIT_[A-Z_]*' "$src/daemon/idemd.c" | sort -u |
	while read -r name; do
		grep -o "$name = [0-9]*" "$src/lib/idem_common.h" | grep -o '[0-9]*$'
	done | sort -un)
doc_idemd_codes=$(tags "$doc/idemd.8" "EXIT STATUS" | sort -un)
[ "$idemd_codes" = "$doc_idemd_codes" ] ||
	problem "idemd(8) EXIT STATUS lists" $doc_idemd_codes "but daemon/idemd.c returns" $idemd_codes

[ "$fail" -eq 0 ] && echo "check_docs: the manual pages agree with the code"
exit "$fail"
