#!/bin/sh
# Builds each libFuzzer target in tests/fuzz with clang (ASan+UBSan) and runs
# it for the given number of seconds, starting from its committed corpus in
# tests/corpus/NAME.  New inputs go to build-fuzz/corpus/NAME (not committed);
# copy any crash reproducer into tests/corpus/NAME so `make test` replays it.
set -e
cd "$(dirname "$0")/.."
secs=${1:-60}
flags="-g -O1 -fsanitize=fuzzer,address,undefined -std=gnu11 -D_GNU_SOURCE -I. -Ibuild-fuzz -pthread"
mkdir -p build-fuzz/proto
protoc-c --c_out=build-fuzz proto/subternary.proto
for target in tests/fuzz/fuzz_*.c; do
    name=$(basename "$target" .c); name=${name#fuzz_}
    libsrc=$(sed -n 's/^\/\/ sources: //p' "$target")
    [ -n "$libsrc" ] || libsrc="common/error.c model/gguf.c model/llama.c kernels/types.c kernels/dequant_ref.c"
    echo "fuzz $name: building"
    clang $flags -o build-fuzz/fuzz_$name "$target" $libsrc -lm
    mkdir -p build-fuzz/corpus/$name
    echo "fuzz $name: running for ${secs}s"
    build-fuzz/fuzz_$name -max_total_time="$secs" -max_len=65536 -artifact_prefix=build-fuzz/ \
        build-fuzz/corpus/$name tests/corpus/$name
done
