#!/usr/bin/env bash
# Builds the operator and worker images for real and smoke-tests them inside:
#
#   tests/images/build-and-smoke.sh [REPO]        (as root; needs buildah and debootstrap)
#
#  1. base: debootstrap --variant=minbase bookworm -> localhost/rpcjob-base:bookworm (make-base.sh)
#  2. context: the committed tree (git archive HEAD), or the working tree with
#     RPCJOB_IMAGE_CONTEXT=worktree (filtered by docker/context.dockerignore)
#  3. buildah bud --storage-driver vfs --isolation chroot, BASE_IMAGE=the local base,
#     apt pointed at this machine's Debian mirror, VERSION from the repo
#  4. buildah run: each binary prints the version; no compiler or -dev package in the
#     runtime images; non-root user; OCI labels; two workers exchange tensors
#
# Prints build times and image sizes. Slow (libtorch code compiled inside the image):
# ctest registers it only with -DRPCJOB_IMAGE_TESTS=ON. RPCJOB_IMAGES="operator" or
# "worker" builds one; RPCJOB_IMAGE_JOBS sets the build's parallelism (default 2);
# RPCJOB_IMAGE_REUSE=1 smoke-tests images already built instead of rebuilding them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "${1:-$here/../..}" && pwd)
. "$here/lib.sh"
version=$(head -n1 "$repo/VERSION" | tr -d '[:space:]')
images=${RPCJOB_IMAGES:-operator worker}
jobs=${RPCJOB_IMAGE_JOBS:-2}
failures=()
fail() { echo "FAIL: $*" >&2; failures+=("$*"); }
declare -a summary=()

for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "images: $tool is missing (apt-get install $tool)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "images: run as root (debootstrap, chroot isolation)" >&2; exit 1; }

"$here/make-base.sh"

# --- the build context
ctx_args=()
if [ "${RPCJOB_IMAGE_CONTEXT:-head}" = worktree ]; then
  context=$repo
  ctx_args=(--ignorefile "$repo/docker/context.dockerignore")
  echo "images: context = working tree of $repo"
else
  context=$workdir/context
  rm -rf "$context" && mkdir -p "$context"
  git -C "$repo" archive --format=tar HEAD | tar -x -C "$context"
  echo "images: context = git HEAD $(git -C "$repo" rev-parse --short HEAD)"
fi

mirror=$(debian_mirror)
security=$(RPCJOB_DEBIAN_MIRROR=${RPCJOB_DEBIAN_SECURITY_MIRROR:-} debian_mirror bookworm-security)
build_args=(--build-arg "BASE_IMAGE=$base_image" --build-arg "VERSION=$version"
            --build-arg "DEBIAN_MIRROR=$mirror" --build-arg "DEBIAN_SECURITY_MIRROR=$security"
            --build-arg "JOBS=$jobs")

build() {  # build NAME -> localhost/rpcjob-NAME:VERSION
  local name=$1 start=$SECONDS log=$workdir/build-$1.log
  if [ "${RPCJOB_IMAGE_REUSE:-0}" = 1 ] && image_exists "localhost/rpcjob-$name:$version"; then
    echo "images: reusing localhost/rpcjob-$name:$version (RPCJOB_IMAGE_REUSE=1)"
    summary+=("rpcjob-$name reused, $(bah images --format '{{.Size}}' "localhost/rpcjob-$name:$version" | head -n1)")
    return 0
  fi
  echo "images: building rpcjob-$name (log: $log)"
  if ! nice -n 19 buildah --root "$storage_root" --runroot "$workdir/run" --storage-driver vfs \
        bud --isolation chroot --layers=false -f "$context/docker/$name.Dockerfile" "${ctx_args[@]}" \
        "${build_args[@]}" -t "localhost/rpcjob-$name:$version" "$context" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    fail "build of rpcjob-$name"
    return 1
  fi
  bah rmi --prune >/dev/null 2>&1 || true   # the previous build's image, now untagged
  local size
  size=$(bah images --format '{{.Size}}' "localhost/rpcjob-$name:$version" | head -n1)
  summary+=("$(printf 'rpcjob-%-9s built in %5ds, %s' "$name" $((SECONDS - start)) "$size")")
  echo "images: rpcjob-$name built in $((SECONDS - start))s, $size"
}

run_in() {  # run_in IMAGE CMD...: a throwaway container
  local ctr rc=0
  ctr=$(bah from --pull=never "$1")
  shift
  bah run --isolation chroot "$ctr" -- "$@" || rc=$?
  bah rm "$ctr" >/dev/null
  return $rc
}

check_common() {  # check_common NAME BINARY...
  local name=$1 image=localhost/rpcjob-$1:$version; shift
  local label user
  label=$(bah inspect --type image --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$image")
  [ "$label" = "$version" ] || fail "rpcjob-$name: label org.opencontainers.image.version=$label, want $version"
  label=$(bah inspect --type image --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.source"}}' "$image")
  [ -n "$label" ] || fail "rpcjob-$name: no org.opencontainers.image.source label"
  user=$(bah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
  [ "$user" = "65532:65532" ] || fail "rpcjob-$name: runs as '$user', want 65532:65532"
  for bin in "$@"; do
    out=$(run_in "$image" "$bin" --version 2>&1) || fail "rpcjob-$name: $bin --version exited non-zero: $out"
    case "$out" in *"$version"*) echo "ok: rpcjob-$name: $bin --version -> $out" ;;
                   *) fail "rpcjob-$name: $bin --version printed '$out', not $version" ;; esac
  done
  # Runtime stage: no compiler, no -dev package.
  dev=$(run_in "$image" sh -c 'dpkg-query -W -f="\${Package}\n" | grep -E -- "-dev$|^(gcc|g\+\+|cpp|clang|cmake|ninja-build|make)(-[0-9]+)?$" || true')
  [ -z "$dev" ] && echo "ok: rpcjob-$name: no compiler or -dev package" \
    || fail "rpcjob-$name: build packages in the runtime image: $(echo $dev)"
}

for name in $images; do
  build "$name" || continue
  case "$name" in
    operator) check_common operator rpcjob-operator ;;
    worker)
      check_common worker rpcjob-worker rpcjob-bench rpcjob-launch
      run_in "localhost/rpcjob-worker:$version" sh -c \
        'ls /usr/local/lib/librpcjob_runtime.so* && test -f /usr/local/include/rpcjob/runtime/runtime.h && test -f /usr/local/lib/cmake/rpcjob/rpcjobConfig.cmake && ls /usr/local/share/rpcjob/examples' \
        >/dev/null && echo "ok: rpcjob-worker ships the runtime library, headers, CMake package and examples" \
        || fail "rpcjob-worker: library, headers, CMake package or examples missing"
      # Two workers in one container exchange tensors (smoke-workers.sh runs inside).
      ctr=$(bah from --pull=never "localhost/rpcjob-worker:$version")
      bah copy "$ctr" "$here/smoke-workers.sh" /tmp/smoke-workers.sh >/dev/null
      if out=$(bah run --isolation chroot "$ctr" -- sh /tmp/smoke-workers.sh 2>&1); then
        echo "$out" | sed 's/^/  /'; echo "ok: rpcjob-worker: two workers exchanged tensors"
      else
        echo "$out" | sed 's/^/  /' >&2; fail "rpcjob-worker: two workers did not exchange tensors"
      fi
      bah rm "$ctr" >/dev/null
      ;;
  esac
done

echo "=== images"
printf '  %s\n' "${summary[@]:-none built}"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failures[@]}" >&2
  exit 1
fi
