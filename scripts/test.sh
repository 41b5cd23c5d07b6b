#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs dependencies, builds with warnings as errors,
# runs every test, rebuilds under AddressSanitizer + UndefinedBehaviorSanitizer and runs every
# test again, then checks the tree is clang-format clean.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

echo "== build (warnings are errors)"
BUILD_DIR=build BUILD_TYPE=RelWithDebInfo bash scripts/build.sh -DIWARP_WERROR=ON -DIWARP_SANITIZE=OFF
echo "== tests"
ctest --test-dir build --output-on-failure -j"$(nproc)"

echo "== build with ASan + UBSan"
BUILD_DIR=build-asan BUILD_TYPE=Debug bash scripts/build.sh -DIWARP_WERROR=ON -DIWARP_SANITIZE=ON \
  -DIWARP_BUILD_BENCH=OFF
echo "== tests under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)"

echo "== clang-format"
files=$(git ls-files '*.cpp' '*.hpp')
if ! clang-format --dry-run -Werror $files; then
  echo "clang-format: the files above need formatting (run: clang-format -i \$(git ls-files '*.cpp' '*.hpp'))"
  exit 1
fi
echo "all tests passed (plain and ASan+UBSan), tree is clang-format clean"
