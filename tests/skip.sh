#!/usr/bin/env bash
# The shell tests' skips (tests/README.md). Sourced: skip_test says what was not tested
# and why and exits 77 (the tests' SKIP_RETURN_CODE); skip_test_unless_ci fails instead
# (exit 1) when CI=true, for a cause CI's machine removes (a tool or a baseline it has).
# Run as `skip.sh --unless-ci WHY` or `skip.sh WHY`, it does the same for a test that
# cannot run at all.
skip_test() {
  echo "SKIP: $*"
  exit 77
}
skip_test_unless_ci() {
  if [ "${CI:-}" = true ]; then
    echo "FAIL: not tested, and CI=true requires it: $*"
    exit 1
  fi
  skip_test "$@"
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  if [ "${1:-}" = --unless-ci ]; then
    shift
    skip_test_unless_ci "$@"
  fi
  skip_test "$@"
fi
