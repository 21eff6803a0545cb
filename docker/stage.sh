#!/bin/bash
# stage.sh operator|worker SRC BUILD OUT   (the images' build stage, after the build)
#
# Puts what the runtime stage ships under OUT/root (a tree copied onto / as is) and
# writes OUT/runtime-packages.txt: the Debian packages owning every shared library
# the shipped binaries load (ldd + dpkg -S), so the runtime stage installs exactly
# those and no -dev package.
#
# Install rules first (cmake --install); whatever the project does not install yet
# is taken from the build tree, with a notice, so the image is complete either way.
set -euo pipefail
kind=$1 src=$2 build=$3 out=$4
root=$out/root
prefix=/usr/local
mkdir -p "$root$prefix/bin" "$root$prefix/lib"
DESTDIR=$root cmake --install "$build" --prefix "$prefix" >/dev/null

take() {  # take NAME DEST_DIR: from the build tree unless installed already
  local name=$1 dest=$2 found
  [ -e "$root$prefix/$dest/$name" ] && return 0
  found=$(find "$build" -name "$name" -type f -perm -u+x -print -quit)
  [ -n "$found" ] || { echo "stage: $name was not built" >&2; exit 1; }
  echo "stage: $name has no install() rule; copied from the build tree"
  install -m 0755 "$found" "$root$prefix/$dest/$name"
}

case "$kind" in
  operator)
    take rpcjob-operator bin
    ;;
  worker)
    take rpcjob-worker bin
    take rpcjob-bench bin
    take rpcjob-launch bin  # runs a pod's workers (runner/README.md)
    # The project's shared libraries (the runtime and what it links of ours).
    while IFS= read -r lib; do
      base=$(basename "$lib")
      if [ ! -e "$root$prefix/lib/$base" ]; then
        echo "stage: $base has no install() rule; copied from the build tree"
        cp -P "$lib" "$root$prefix/lib/"
      fi
    done < <(find "$build" -name 'librpcjob*.so*' \( -type f -o -type l \) | sort)
    ls "$root$prefix"/lib/librpcjob_runtime.so* >/dev/null 2>&1 \
      || { echo "stage: no librpcjob_runtime.so (configure with -DBUILD_SHARED_LIBS=ON)" >&2; exit 1; }
    # Public headers, for users who build their own workers FROM this image.
    if [ ! -d "$root$prefix/include/rpcjob" ]; then
      echo "stage: the runtime's headers have no install() rule; copied from the source tree"
      for inc in "$src"/worker/include "$src"/worker/instrument/include "$src"/assignment/include \
                 "$build"/generated; do
        [ -d "$inc" ] && cp -r "$inc"/. "$root$prefix/include/"
      done
    fi
    mkdir -p "$root$prefix/share/rpcjob"
    [ -d "$root$prefix/share/rpcjob/examples" ] || cp -r "$src/examples" "$root$prefix/share/rpcjob/examples"
    ;;
  *) echo "usage: $0 operator|worker SRC BUILD OUT" >&2; exit 2 ;;
esac

# Runtime packages: the owners of the libraries our files load directly (their
# NEEDED entries, resolved by ldd); apt brings in what those depend on.
owner() {  # the Debian package owning a file; bookworm registers some under /lib, some under /usr/lib
  local f=$1 p cand
  for cand in "$f" "$(readlink -f "$f")" "${f#/usr}" "/usr$f"; do
    p=$(dpkg-query -S "$cand" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$p" ] && { echo "$p"; return; }
  done
  echo "stage: no package owns $f (it must come with the base image)" >&2
}
export LD_LIBRARY_PATH=$root$prefix/lib
elfs=$(find "$root$prefix" -type f \( -perm -u+x -o -name '*.so*' \) \
         -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
for elf in $elfs; do
  needed=$(objdump -p "$elf" | awk '$1 == "NEEDED" { print $2 }')
  ldd "$elf" | awk -v needed=" $(echo $needed) " '$2 == "=>" && $3 ~ /^\// && index(needed, " " $1 " ") { print $3 }'
done | grep -v "^$root" | sort -u | while IFS= read -r lib; do owner "$lib"; done \
  | sort -u > "$out/runtime-packages.txt"
if ldd "$root$prefix"/bin/* 2>/dev/null | grep -q 'not found'; then
  ldd "$root$prefix"/bin/* | grep 'not found' >&2; echo "stage: unresolved libraries" >&2; exit 1
fi
echo "stage: runtime packages: $(tr '\n' ' ' < "$out/runtime-packages.txt")"
