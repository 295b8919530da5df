#!/bin/sh
# `make models`: generates the demo model pair into models/ (git-ignored),
# once.  Files that are present and load are kept; delete models/ to make
# them again.  (make builds build/subternary first.)
#
#   models/demo-target.q8_0.gguf          target: dim 1024, 12 layers, Q8_0
#   models/demo-draft.q4_0.gguf           its draft: dim 512, 2 layers, Q4_0
#   models/demo-draft-mismatch.q4_0.gguf  a draft of the same shape from another
#                                         seed: it does not agree with the target
#                                         (for `subternary bench governor`)
set -eu
cd "$(dirname "$0")/.."
BIN=build/subternary
T=models/demo-target.q8_0.gguf
D=models/demo-draft.q4_0.gguf
M=models/demo-draft-mismatch.q4_0.gguf

valid() {
    [ -f "$1" ] && "$BIN" model info "$1" >/dev/null 2>&1
}

mkdir -p models
start=$(date +%s.%N)
made=""
if valid "$T" && valid "$D"; then
    echo "models: $T and $D are present"
else
    "$BIN" model gen --preset demo --out-target "$T" --out-draft "$D"
    made="$made $T $D"
fi
if valid "$M"; then
    echo "models: $M is present"
else
    "$BIN" model gen --preset demo --seed 2 --out-draft "$M"
    made="$made $M"
fi
if [ -n "$made" ]; then
    end=$(date +%s.%N)
    echo "models: generated$made in $(echo "$start $end" | awk '{printf "%.1f", $2 - $1}') s"
fi
