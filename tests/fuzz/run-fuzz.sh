#!/bin/sh
# tests/fuzz/run-fuzz.sh: builds a reader's libFuzzer target with clang-22, AddressSanitizer and
# UBSan, then fuzzes it from its committed corpus for SECONDS (default 300).
# usage: tests/fuzz/run-fuzz.sh [codeobj|safetensors] [SECONDS]
#   (from the source tree; needs libclang-rt-22-dev; new inputs go to $FUZZ_OUT/corpus-TARGET,
#   the committed corpus is only read: copy a find into it as regress-NAME once it is fixed)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${FUZZ_OUT:-/tmp/hsamono-fuzz}
target=codeobj
case "${1:-}" in
  codeobj|safetensors) target=$1; shift ;;
  ''|*[!0-9]*) [ $# -eq 0 ] || { echo "run-fuzz.sh: unknown target '$1' (codeobj or safetensors)" >&2; exit 2; } ;;
esac
san="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE"
mkdir -p "$out/corpus-$target"
if [ "$target" = codeobj ]; then
  clang-22 $san -I"$top/hsa" "$here/fuzz_codeobj.c" "$top/hsa/codeobj.c" "$top/hsa/status.c" \
    $(pkg-config --cflags --libs libelf msgpack) -o "$out/fuzz_codeobj"
  seeds="$here/corpus"
else
  clang-22 $san -I"$top/hsa" -I"$top/layer/weights" "$here/fuzz_safetensors.c" \
    "$top/layer/weights/safetensors.c" "$top/layer/weights/tensor.c" "$top/hsa/status.c" \
    $(pkg-config --cflags --libs json-c) -o "$out/fuzz_safetensors"
  seeds="$here/corpus-safetensors"
fi
"$out/fuzz_$target" -max_total_time="${1:-300}" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
  "$out/corpus-$target" "$seeds"
