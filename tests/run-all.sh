#!/usr/bin/env bash
# Runs every idemd test on a fresh Debian 12 machine: installs what is missing, builds
# warning-free (Debug, Release, and Asan = ASan+UBSan), checks formatting, the include layers
# of ARCHITECTURE.md and the manual pages against the code (tests/check_docs.sh), runs the unit tests in both builds, the fuzzers for a bounded time, and the
# integration and fault tests (real Postgres + embedded Kafka) under ASan+UBSan, several side by
# side (tests/README.md, "Time").
#
# At the end it prints each phase's wall time and the slowest tests. It fails when the tests
# under ASan take longer than the budget, so that a new test pays for its own time.
#
# Environment: IDEM_TEST_JOBS (tests side by side, default 4), IDEM_TEST_BUDGET_S (the ASan
# tests' wall-time budget, default 2400), IDEM_FUZZ_SECONDS (each fuzzer's time, default 30),
# IDEM_CTEST_ARGS (more ctest arguments, e.g. "-R t_kill9").
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
jobs=$(nproc)
test_jobs=${IDEM_TEST_JOBS:-4}
budget=${IDEM_TEST_BUDGET_S:-2400}
logs=$src/build/logs

phase_names=()
phase_secs=()
phase_t0=
phase_now=

now_ms() { echo $((${EPOCHREALTIME/[.,]/} / 1000)); }

# phase NAME: end the phase under way (recording its wall time) and begin NAME.
phase() {
	phase_end
	phase_now=$1
	phase_t0=$(now_ms)
	echo "== $1"
}

phase_end() {
	[ -n "$phase_now" ] || return 0
	phase_names+=("$phase_now")
	phase_secs+=("$((($(now_ms) - phase_t0) / 1000))")
	phase_now=
}

# slowest LOG N: the N slowest tests of a ctest log, "seconds name result" a line.
slowest() {
	sed -nE 's/^.*Test +#[0-9]+: ([^ ]+) \.+ *(\*+)?([A-Za-z]+)[^0-9]* ([0-9.]+) sec.*$/\4 \1 \3/p' "$1" |
		sort -rn | head -n "$2"
}

summary() {
	local rc=$? i total=0
	phase_end
	echo "== time"
	for i in "${!phase_names[@]}"; do
		printf '%6ds  %s\n' "${phase_secs[$i]}" "${phase_names[$i]}"
		total=$((total + phase_secs[i]))
	done
	printf '%6ds  %s\n' "$total" "in all"
	if [ -s "$logs/ctest-asan.log" ]; then
		echo "== the 10 slowest tests (ASan, $test_jobs side by side)"
		slowest "$logs/ctest-asan.log" 10 | awk '{ printf "%8.1fs  %s %s\n", $1, $2, $3 }'
	fi
	exit "$rc"
}
trap summary EXIT

phase "install"
bash tests/install-deps.sh
mkdir -p "$logs"

phase "format"
git ls-files '*.c' '*.cc' '*.h' | xargs clang-format --dry-run --Werror
phase "layers (ARCHITECTURE.md's include order)"
bash tests/check_layers.sh
phase "docs"
IDEM_JOBS=$jobs bash tests/check_docs.sh

phase "build (Debug)"
cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/debug -j"$jobs"
phase "build (Release: the optimiser's warnings, -Werror too)"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build/release -j"$jobs"
phase "build (Asan)"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Asan >/dev/null
cmake --build build/asan -j"$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
phase "unit tests (Debug)"
ctest --test-dir build/debug -L unit -j"$jobs" --output-on-failure
phase "fuzz (bounded)"
bash tests/fuzz/run.sh "$src" "${IDEM_FUZZ_SECONDS:-30}"

phase "unit, integration and fault tests (Asan, $test_jobs side by side)"
t0=$(now_ms)
# shellcheck disable=SC2086 # IDEM_CTEST_ARGS is a list of arguments
ctest --test-dir build/asan -j"$test_jobs" --output-on-failure --timeout 900 ${IDEM_CTEST_ARGS:-} |
	tee "$logs/ctest-asan.log"
took=$((($(now_ms) - t0) / 1000))
if [ "$took" -gt "$budget" ]; then
	echo "run-all: the tests under ASan took ${took}s, over the budget of ${budget}s" \
		"(tests/README.md, \"Time\"): make the slowest shorter (they are listed below)" >&2
	exit 1
fi
# Each test's seconds, longest first, in the form of tests/test-seconds.txt (its COST in ctest).
slowest "$logs/ctest-asan.log" 1000 | awk '{ printf "%.0f %s\n", $1, $2 }' >"$logs/test-seconds.txt"
