#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time on a copy of its
# committed seed corpus. Any crash, leak or sanitizer report fails the run. The sources each
# target needs are listed here by hand: a new lib/ file that one of them calls goes here too.
# Targets build side by side, and run as many at a time as there are CPUs (each is one process
# on one CPU, so each still gets its SECONDS of a CPU).
# usage: run.sh SOURCE_DIR SECONDS
set -euo pipefail
src=$1
secs=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cpus=$(nproc)

# bg CMD...: run CMD in the background; wait_all fails if any of them failed.
pids=()
bg() {
	"$@" &
	pids+=($!)
}
wait_all() {
	local pid rc=0
	for pid in "${pids[@]}"; do
		wait "$pid" || rc=1
	done
	pids=()
	return $rc
}
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
	-D_POSIX_C_SOURCE=200809L -DIDEM_VERSION='"fuzz"' -I"$src/lib")

# The Protobuf module is C++: compiled once by clang++, linked into every target that reads fields.
pb=()
for f in "$src"/lib/idem_protobuf*.cc; do
	bg clang++ -c -std=c++17 "${flags[@]/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,}" "$f" \
		-o "$out/$(basename "$f" .cc).o"
	pb+=("$out/$(basename "$f" .cc).o")
done
# Its check of a .proto text's bounds is C.
bg clang -c "${flags[@]/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,}" "$src/lib/idem_protobuf_scan.c" \
	-o "$out/idem_protobuf_scan.o"
pb+=("$out/idem_protobuf_scan.o")
wait_all
pblibs=(-fsanitize-link-c++-runtime -lprotoc $(pkg-config --libs protobuf) -lstdc++)
field=("${pb[@]}" "$src/lib/idem_field.c" "$src/lib/idem_trace.c" "$src/lib/idem_field_json.c" "$src/lib/idem_json.c" "$src/lib/idem_avro.c" "$src/lib/idem_avro_decode.c" "$src/lib/idem_avro_text.c" "$src/lib/idem_common.c"
	"$src/lib/idem_esc.c" "$src/lib/idem_jsonschema.c" "$src/lib/idem_jsonschema_check.c"
	"$src/lib/idem_jsonschema_keywords.c" "$src/lib/idem_jsonschema_pattern.c")
bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_key.c" "${field[@]}" \
	$(pkg-config --cflags --libs json-c avro-c) "${pblibs[@]}" -lm -o "$out/fuzz_key"
cfg=("$src/lib/idem_cfg.c" "$src/lib/idem_cfg_walk.c" "$src/lib/idem_cfg_ops.c"
	"$src/lib/idem_cfg_registry.c" "$src/lib/idem_cfg_routes.c" "$src/lib/idem_cfg_secrets.c"
	"$src/lib/idem_lex.c" "$src/lib/idem_log.c" "$src/lib/idem_url.c")
bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_cfg.c" "${cfg[@]}" "${field[@]}" \
	$(pkg-config --cflags --libs yaml-0.1 json-c avro-c rdkafka libpq) "${pblibs[@]}" -lm -o "$out/fuzz_cfg"
bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_decode.c" "$src/lib/idem_batch.c" "$src/lib/idem_bind.c" \
	"${cfg[@]}" "${field[@]}" \
	$(pkg-config --cflags --libs yaml-0.1 json-c avro-c rdkafka libcrypto libpq) "${pblibs[@]}" -lpthread -lm \
	-o "$out/fuzz_decode"

bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_json.c" "${field[@]}" \
	$(pkg-config --cflags --libs json-c avro-c) "${pblibs[@]}" -lm -o "$out/fuzz_json"
bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_avro.c" "$src/lib/idem_avro.c" "$src/lib/idem_avro_decode.c" "$src/lib/idem_avro_text.c" "$src/lib/idem_common.c" \
	$(pkg-config --cflags --libs avro-c json-c) -lm -o "$out/fuzz_avro"

bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_protobuf.c" "${pb[@]}" "$src/lib/idem_common.c" \
	"${pblibs[@]}" -lm -o "$out/fuzz_protobuf"

bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_schema.c" "${pb[@]}" "$src/lib/idem_avro.c" \
	"$src/lib/idem_avro_decode.c" "$src/lib/idem_avro_text.c" "$src/lib/idem_common.c" \
	$(pkg-config --cflags --libs avro-c json-c) "${pblibs[@]}" -lm -o "$out/fuzz_schema"

bg clang "${flags[@]}" "$src/tests/fuzz/fuzz_jsonschema.c" "$src/lib/idem_jsonschema.c" \
	"$src/lib/idem_jsonschema_check.c" "$src/lib/idem_jsonschema_keywords.c" \
	"$src/lib/idem_jsonschema_pattern.c" "$src/lib/idem_esc.c" "$src/lib/idem_common.c" \
	$(pkg-config --cflags --libs json-c) -lm -o "$out/fuzz_jsonschema"

wait_all

# fuzz T: run fuzz_T for SECONDS on a copy of its seed corpus; on failure show its log's end.
fuzz() {
	local t=$1
	mkdir -p "$out/corpus-$t"
	cp "$src/tests/fuzz/corpus/$t/"* "$out/corpus-$t/"
	if ! (cd "$out" && "./fuzz_$t" -max_total_time="$secs" -print_final_stats=0 "corpus-$t" \
		>"$out/fuzz_$t.log" 2>&1); then
		tail -50 "$out/fuzz_$t.log"
		echo "fuzz_$t failed" >&2
		return 1
	fi
	echo "fuzz_$t: ${secs}s, $(grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "$out/fuzz_$t.log" | tail -1)"
}
for t in key cfg decode json avro protobuf jsonschema schema; do
	[ ${#pids[@]} -lt "$cpus" ] || wait_all
	bg fuzz "$t"
done
wait_all
