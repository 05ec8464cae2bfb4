#!/bin/sh
# tests/fuzz/run-fuzz.sh: builds the code-object reader's libFuzzer target with clang-22 and
# AddressSanitizer, then fuzzes it from the committed corpus for SECONDS (default 300).
# usage: tests/fuzz/run-fuzz.sh [SECONDS]   (from the source tree; needs libclang-rt-22-dev)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${FUZZ_OUT:-/tmp/hsamono-fuzz}
mkdir -p "$out/corpus"
clang-22 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -D_GNU_SOURCE -I"$top/hsa" "$here/fuzz_codeobj.c" "$top/hsa/codeobj.c" "$top/hsa/status.c" \
  $(pkg-config --cflags --libs libelf msgpack) -o "$out/fuzz_codeobj"
# new inputs go to $out/corpus; the committed corpus is only read
"$out/fuzz_codeobj" -max_total_time="${1:-300}" -max_len=65536 -timeout=10 \
  "$out/corpus" "$here/corpus"
