#!/bin/sh
# `make run`: serves one prompt with the demo pair, once with the target alone
# and once with speculative decoding, and prints the text and the speed-up.
set -e
cd "$(dirname "$0")/.."
T=models/demo-target.q8_0.gguf
D=models/demo-draft.q4_0.gguf
PROMPT=${PROMPT:-"Once upon a time, in a small village by the sea, there lived"}
N=${N:-128}
for f in "$T" "$D"; do
    [ -f "$f" ] || { echo "missing $f: run 'make models' first" >&2; exit 1; }
done
# run OUT.json [options]: the text streams to the terminal, the summary's
# JSON line goes to OUT.json.
run() {
    out=$1; shift
    build/subternary generate -m "$T" "$@" -p "$PROMPT" -n "$N" --json 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    tail -n 1 "$tmp/err" > "$out"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "== target alone ($T), $N tokens"
run "$tmp/ar.json"
echo "== speculative (draft $D), $N tokens"
run "$tmp/spec.json" -d "$D"
python3 - "$tmp/ar.json" "$tmp/spec.json" <<'PY'
import json, sys
ar = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sp = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
print()
print("autoregressive: %6.1f tokens/s" % ar["tokens_per_second"])
print("speculative:    %6.1f tokens/s  (acceptance %.2f, mean K %.2f)" % (sp["tokens_per_second"], sp["acceptance"], sp["mean_k"]))
print("speed-up:       %.2fx" % (sp["tokens_per_second"] / ar["tokens_per_second"]))
PY
