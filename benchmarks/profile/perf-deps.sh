#!/usr/bin/env bash
# Copies this machine's perf (Debian's linux-perf) and the libraries it needs
# into build-perf/ (git-ignored), for a GPU host that has no perf: carry
# build-perf with the device tool and run perf-record.sh there. glibc, libstdc++
# and libgcc_s stay behind (the host's own are newer).
set -euo pipefail
out=${1:-build-perf}
perf=$(command -v perf) || { echo "no perf here: apt-get install linux-perf" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/lib"
cp "$perf" "$out/perf"
ldd "$perf" | awk '{print $3}' | grep '^/' | while read -r lib; do
  case $(basename "$lib") in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | ld-linux* | libstdc++.so* | libgcc_s.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
