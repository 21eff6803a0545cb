#!/bin/sh
# Builds the decoders' libFuzzer targets with clang and runs each for a bounded
# time: the header codec, and the authentication handshake (libcrypto).
# Usage: run_fuzzer.sh CLANGXX WORKER_DIR OUT_DIR SECONDS
set -eu
clangxx=$1 worker=$2 out=$3 seconds=$4
mkdir -p "$out/corpus" "$out/auth-corpus"
"$clangxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$worker/src" "$worker/fuzz/header_codec_fuzzer.cc" "$worker/src/header_codec.cc" \
  "$worker/src/cuda_lane/handles_wire.cc" -o "$out/header_codec_fuzzer"
"$clangxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$worker/src" "$worker/fuzz/auth_handshake_fuzzer.cc" "$worker/src/auth/handshake.cc" \
  -lcrypto -o "$out/auth_handshake_fuzzer"
# Seeds: a valid header, so the fuzzer starts from the interesting part of the space.
printf 'RJ\001\003\000\000\001\000\000\000\000\000\000\000\000\000\000\000\002\000ab\000\000\000\000' \
  > "$out/corpus/seed-call"
# A fast value: (int 7, inline float tensor of shape [1]).
printf '\365\001\006\002\000\000\000\003\007\000\000\000\000\000\000\000\007\006\001\001\000\000\000\000\000\000\000\004\000\000\000\000\000\000\000\000\000\200\077' \
  > "$out/corpus/seed-fast"
# A hello from "hostile" (32-byte nonce) and a proof (32-byte MAC).
printf 'RA\001\001%032d\007\000hostile' 0 > "$out/auth-corpus/seed-hello"
printf 'RA\001\003%032d' 0 > "$out/auth-corpus/seed-proof"
"$out/header_codec_fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=5 "$out/corpus"
"$out/auth_handshake_fuzzer" -max_total_time="$(( (seconds + 1) / 2 ))" -max_len=512 -timeout=5 "$out/auth-corpus"
