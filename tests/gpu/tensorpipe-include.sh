#!/usr/bin/env bash
# Prints the folder with Debian's TensorPipe and libnop headers for the GPU build
# (RPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR), moving them there from .gpudeps/root/usr/include
# first. They must not stay there: prometheus-cpp's CMake targets put that folder on
# every include path (-isystem) ahead of libtorch's own TensorPipe headers, and Debian's
# common/error.h gives tensorpipe::Error another layout (a virtual destructor) than the
# libtorch binary has: copying Error::kSuccess crashed (instrument_test, found with ASan
# on the device). Only -idirafter names the new folder. Run from the repository root.
set -euo pipefail
deps=$PWD/.gpudeps/root
tp=$PWD/.gpudeps/tensorpipe-include
if [[ -d $deps/usr/include/tensorpipe ]]; then
  mkdir -p "$tp" && rm -rf "$tp/tensorpipe" "$tp/nop"
  mv "$deps/usr/include/tensorpipe" "$deps/usr/include/nop" "$tp/"
fi
if [[ ! -f $tp/tensorpipe/channel/channel.h || ! -d $tp/nop ]]; then
  echo "FATAL: .gpudeps lacks TensorPipe's interface headers or libnop:" \
    'EXTRA="libtensorpipe-dev libnop-dev" ../shared/tools/gpu-deps.sh' >&2
  exit 1
fi
echo "$tp"
