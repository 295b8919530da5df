#!/bin/bash
# Runs every test binary of each build tree given (build, build-asan) and ends
# with one summary line "N passed, N failed".  Every test runs in the first
# tree; tests listed in tests/slow.list are skipped in the later (sanitizer)
# trees, since they start many processes or stream large files.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0; failed=()
slow=$(grep -v '^#' tests/slow.list 2>/dev/null || true)
first=1
for tree in "$@"; do
    for bin in "$tree"/tests/test_*; do
        [ -x "$bin" ] || continue
        case "$bin" in *.o|*.d) continue;; esac
        name=$(basename "$bin")
        if [ $first -eq 0 ] && echo "$slow" | grep -qx "$name"; then continue; fi
        echo "=== $tree/$name"
        start=$(date +%s)
        if "$bin"; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$tree/$name"); fi
        echo "=== $tree/$name: $(( $(date +%s) - start ))s"
    done
    first=0
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
