#!/usr/bin/env bash
# Runs every idemd test on a fresh Debian 12 machine: installs what is missing, builds
# warning-free (Debug, Release, and Asan = ASan+UBSan), checks formatting and the include layers
# of ARCHITECTURE.md, runs the unit tests in both
# builds, the integration tests (real Postgres + embedded Kafka) under ASan+UBSan, and the
# fuzzers for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
jobs=$(nproc)

bash tests/install-deps.sh

echo "== format"
git ls-files '*.c' '*.cc' '*.h' | xargs clang-format --dry-run --Werror
echo "== layers (ARCHITECTURE.md's include order)"
bash tests/check_layers.sh

echo "== build (Debug)"
cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/debug -j"$jobs"
echo "== build (Release: the optimiser's warnings, -Werror too)"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build/release -j"$jobs"
echo "== build (Asan)"
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Asan >/dev/null
cmake --build build/asan -j"$jobs"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "== unit tests (Debug)"
ctest --test-dir build/debug -L unit --output-on-failure
echo "== fuzz (bounded)"
bash tests/fuzz/run.sh "$src" "${IDEM_FUZZ_SECONDS:-30}"
echo "== unit and integration tests (Asan)"
ctest --test-dir build/asan --output-on-failure --timeout 900 ${IDEM_CTEST_ARGS:-}
