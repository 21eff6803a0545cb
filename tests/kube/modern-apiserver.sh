#!/usr/bin/env bash
# A modern (Kubernetes v1.36) CustomResourceDefinition API server for checking the
# RpcJob API as a current cluster applies it: structural schema, defaults, CEL rules
# (x-kubernetes-validations, which the v1.20 control plane of control-plane.sh
# drops), status subresource, server-side apply. It serves only CRDs and custom
# objects: no pods, namespaces or RBAC; the operator's tests stay on control-plane.sh.
#
#   tests/kube/modern-apiserver.sh build        build the server and fetch kubectl into the cache
#   tests/kube/modern-apiserver.sh start DIR    start etcd + the server, state in DIR
#   tests/kube/modern-apiserver.sh stop DIR     stop them (kills what DIR/pids lists)
#   tests/kube/modern-apiserver.sh bin-dir      print the cache's bin folder
#   tests/kube/modern-apiserver.sh built        exit 0 when the cache holds a current build
#
# build (root, network, ~5 GB of scratch space, 5-10 min on 2 cores): debootstrap a
# Debian sid chroot in the cache, install sid's golang-go and
# golang-k8s-apiextensions-apiserver-dev (the Go sources of Kubernetes 1.36) and the
# kubectl package, build modern-apiserver/main.go (ours) there, offline in GOPATH
# mode, into a static binary, copy it and kubectl out, then delete the chroot (set
# RPCJOB_MODERN_KEEP_CHROOT=1 to keep it for a faster rebuild). See
# ../shared/MODERN-APISERVER.md. Idempotent: returns at once when the cache holds
# binaries built from the current main.go. The cache lives outside the repo:
# ${RPCJOB_MODERN_CACHE:-$HOME/.cache/rpcjob/kube-crd-1.36}. Needs debootstrap
# (not installed by scripts/setup.sh); RPCJOB_DEBIAN_MIRROR overrides the mirror
# (default: the first URI of /etc/apt/sources.list.d/debian.sources).
#
# start DIR (Debian bookworm's etcd, installed by scripts/setup.sh test) writes:
#   DIR/kubeconfig          client certificate of group system:masters, the CA
#   DIR/kubeconfig-nogroup  a client certificate without groups (every request is 403)
#   DIR/env                 shell lines: KUBE_URL, KUBE_PORT, ETCD_PORT, KUBE_CA,
#                           KUBE_DIR, KUBECTL
#   DIR/pids                one "name pid" line per process
#   DIR/logs/*.log          each process's output
# It waits until /readyz answers ok. With RPCJOB_KUBE_OWNER_PID set, a watchdog
# stops everything once that process is gone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RPCJOB_MODERN_CACHE:-$HOME/.cache/rpcjob/kube-crd-1.36}
bin=$cache/bin
server=rpcjob-crd-apiserver
main_go=$here/modern-apiserver/main.go
# What the chroot installs: Go, the apiextensions server's sources (pulling in
# apiserver, apimachinery, client-go, component-base, cel-go ...) and kubectl 1.36.
chroot_packages=(golang-go golang-k8s-apiextensions-apiserver-dev kubectl)

log() { echo "modern-apiserver: $*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# ---------------------------------------------------------------- build

# The build is current when both binaries exist and the server came from this main.go.
built() {
  [ -x "$bin/$server" ] && [ -x "$bin/kubectl" ] && [ -f "$bin/main.go.sha256" ] &&
    [ "$(sha256sum <"$main_go" | cut -d' ' -f1)" = "$(cat "$bin/main.go.sha256")" ]
}

mirror() {
  if [ -n "${RPCJOB_DEBIAN_MIRROR:-}" ]; then
    echo "$RPCJOB_DEBIAN_MIRROR"
    return 0
  fi
  local uri
  uri=$(awk '$1=="URIs:" && $2 !~ /security/ {print $2; exit}' \
    /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

in_chroot() { # in_chroot ROOT COMMAND: a clean environment, no /proc needed
  local root=$1
  shift
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/build LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive sh -c "$*"
}

do_build() {
  if built; then
    log "current build in $bin"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "build needs root (debootstrap, chroot)"
  command -v debootstrap >/dev/null || die "missing debootstrap (apt-get install debootstrap)"
  local start=$SECONDS work=$cache/work
  local root=$work/chroot
  mkdir -p "$work"
  # A chroot left by an earlier (failed or kept) build is reused once complete.
  if [ ! -f "$work/chroot.ready" ]; then
    rm -rf "$root"
    log "debootstrap sid from $(mirror) (about 30 s)"
    debootstrap --variant=minbase sid "$root" "$(mirror)" >"$work/debootstrap.log" 2>&1 ||
      die "debootstrap failed, see $work/debootstrap.log"
    # The mirror's sid Release file may be past its Valid-Until.
    echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99rpcjob-no-valid-until"
    log "apt-get install ${chroot_packages[*]} (about 350 packages)"
    in_chroot "$root" "apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      ${chroot_packages[*]}" >"$work/apt.log" 2>&1 || die "apt-get in the chroot failed, see $work/apt.log"
    touch "$work/chroot.ready"
  fi
  local version
  version=$(in_chroot "$root" "dpkg-query -W -f '\${Version}' golang-k8s-apiextensions-apiserver-dev")
  version=v1.${version#0.} # the library's 0.36.4-1 is Kubernetes v1.36.4
  version=${version%%-*}
  local pkg=k8s.io/component-base/version
  local ld="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1"
  ld+=" -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2) -X $pkg.gitTreeState=clean"
  ld+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  rm -rf "$root/build/src"
  mkdir -p "$root/build/src"
  cp "$main_go" "$root/build/src/main.go"
  log "go build $server ($version; 2-4 min)"
  # GOPATH mode over /usr/share/gocode, where Debian's -dev packages put their sources;
  # nothing is fetched. GOROOT is given because go cannot find itself without /proc.
  in_chroot "$root" "cd /build/src && GOROOT=/usr/lib/go GOTELEMETRY=off GO111MODULE=off \
    GOPATH=/usr/share/gocode GOPROXY=off GOTOOLCHAIN=local GOFLAGS= CGO_ENABLED=0 \
    GOCACHE=/build/gocache go build -trimpath -ldflags '$ld' -o /build/$server ." \
    >"$work/go-build.log" 2>&1 || {
    tail -30 "$work/go-build.log" >&2
    die "go build failed, see $work/go-build.log"
  }
  mkdir -p "$bin"
  install -m 0755 "$root/build/$server" "$bin/$server.tmp"
  # sid's kubectl is a dynamically linked Go binary needing glibc 2.34: it runs on
  # bookworm (2.36); checked here so a newer sid that breaks that fails the build.
  install -m 0755 "$root/usr/bin/kubectl" "$bin/kubectl.tmp"
  "$bin/kubectl.tmp" version --client >&2 || die "sid's kubectl does not run on this machine"
  "$bin/$server.tmp" --version >&2 || die "$server does not run"
  mv "$bin/kubectl.tmp" "$bin/kubectl"
  mv "$bin/$server.tmp" "$bin/$server"
  sha256sum <"$main_go" | cut -d' ' -f1 >"$bin/main.go.sha256"
  if [ "${RPCJOB_MODERN_KEEP_CHROOT:-0}" = 1 ]; then
    log "keeping the chroot in $root (RPCJOB_MODERN_KEEP_CHROOT=1)"
  else
    rm -rf "$work"
  fi
  log "built in $((SECONDS - start)) s"
}

# ---------------------------------------------------------------- start/stop

used_ports=" "
free_port() { # free_port VAR: below the ephemeral range, no socket uses it (as control-plane.sh)
  local p
  while :; do
    p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
    case "$used_ports" in *" $p "*) continue ;; esac
    if ! ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null | grep -q .; then
      used_ports+="$p "
      printf -v "$1" %s "$p"
      return 0
    fi
  done
}

wait_ok() { # wait_ok URL SECONDS [curl args...]: until the body is "ok"
  local url=$1 secs=$2 out
  shift 2
  local deadline=$((SECONDS + secs))
  while [ $SECONDS -lt $deadline ]; do
    if out=$(curl -s --fail --max-time 2 "$@" "$url" 2>/dev/null) && [ "$out" = ok ]; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

make_certs() { # make_certs DIR: a private CA, the server's and two clients' certificates
  local d=$1/pki
  [ -f "$d/ca.crt" ] && return 0
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=rpcjob-modern-test-ca" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
      -subj "/CN=rpcjob-crd-apiserver" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
      -out server.crt -days 3650 -extfile server.ext 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    local who subj
    for who in admin nobody; do
      subj="/CN=$who"
      [ "$who" = admin ] && subj="/O=system:masters/CN=admin"
      openssl req -newkey rsa:2048 -nodes -keyout "$who.key" -out "$who.csr" \
        -subj "$subj" 2>/dev/null
      openssl x509 -req -in "$who.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
        -out "$who.crt" -days 3650 -extfile client.ext 2>/dev/null
    done
    rm -f ./*.csr ./*.ext
  )
}

write_kubeconfig() { # write_kubeconfig FILE URL PKI WHO
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: modern
  cluster: {server: "$2", certificate-authority: "$3/ca.crt"}
users:
- name: $4
  user: {client-certificate: "$3/$4.crt", client-key: "$3/$4.key"}
contexts:
- name: modern
  context: {cluster: modern, user: $4, namespace: default}
current-context: modern
EOF
}

do_start() { # do_start DIR
  local dir=$1
  # control-plane.sh's lock: ports are found free here and bound seconds later, so
  # starts of either kind on this machine go one at a time.
  exec 9>"${TMPDIR:-/tmp}/rpcjob-control-plane.lock"
  flock -w 180 9 || log "warning: another control plane is still starting after 180 s; going on"
  trap 'flock -u 9 2>/dev/null' EXIT
  [ -x "$bin/$server" ] || die "$server not built: run $0 build"
  command -v etcd >/dev/null || die "etcd missing (etcd-server package)"
  mkdir -p "$dir/logs"
  dir=$(cd "$dir" && pwd)
  [ -s "$dir/pids" ] && do_stop "$dir"
  : >"$dir/pids"
  make_certs "$dir"
  local etcd_port peer_port kube_port pki=$dir/pki
  free_port etcd_port
  free_port peer_port
  free_port kube_port
  local url=https://127.0.0.1:$kube_port
  write_kubeconfig "$dir/kubeconfig" "$url" "$pki" admin
  write_kubeconfig "$dir/kubeconfig-nogroup" "$url" "$pki" nobody
  cat >"$dir/env" <<EOF
KUBE_DIR=$dir
KUBE_URL=$url
KUBE_PORT=$kube_port
ETCD_PORT=$etcd_port
KUBE_CA=$pki/ca.crt
KUBECTL=$bin/kubectl
EOF

  etcd --name rpcjob-modern --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "rpcjob-modern=http://127.0.0.1:$peer_port" \
    --unsafe-no-fsync >>"$dir/logs/etcd.log" 2>&1 &
  echo "etcd $!" >>"$dir/pids"
  if ! wait_ok "http://127.0.0.1:$etcd_port/health" 30 -o /dev/null -w ok; then
    tail -20 "$dir/logs/etcd.log" >&2
    do_stop "$dir"
    die "etcd did not start"
  fi

  "$bin/$server" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --secure-port="$kube_port" \
    --tls-cert-file="$pki/server.crt" --tls-private-key-file="$pki/server.key" \
    --client-ca-file="$pki/ca.crt" --cert-dir="$dir/server-certs" \
    >>"$dir/logs/$server.log" 2>&1 &
  echo "$server $!" >>"$dir/pids"
  if ! wait_ok "$url/readyz" 60 --cacert "$pki/ca.crt" \
    --cert "$pki/admin.crt" --key "$pki/admin.key"; then
    tail -30 "$dir/logs/$server.log" >&2
    do_stop "$dir"
    die "$server not ready after 60 s"
  fi
  if [ -n "${RPCJOB_KUBE_OWNER_PID:-}" ]; then
    (
      trap '' HUP INT
      while kill -0 "$RPCJOB_KUBE_OWNER_PID" 2>/dev/null && [ -s "$dir/pids" ]; do sleep 1; done
      [ -s "$dir/pids" ] && do_stop "$dir"
    ) </dev/null >/dev/null 2>&1 &
    disown
  fi
  flock -u 9
  log "ready at $url (state in $dir)"
}

do_stop() { # do_stop DIR: every process listed in DIR/pids, 2 s each before KILL
  local dir=$1
  [ -f "$dir/pids" ] || return 0
  local pids pid alive _
  pids=$(awk '{print $2}' "$dir/pids")
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for _ in $(seq 20); do
    alive=
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive+=" $pid"; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  # shellcheck disable=SC2086
  [ -n "$alive" ] && kill -9 $alive 2>/dev/null
  : >"$dir/pids"
}

case "${1:-}" in
  build) do_build ;;
  built) built ;;
  start) do_start "${2:?usage: $0 start DIR}" ;;
  stop) do_stop "${2:?usage: $0 stop DIR}" ;;
  bin-dir) echo "$bin" ;;
  *)
    echo "usage: $0 build | built | start DIR | stop DIR | bin-dir" >&2
    exit 2
    ;;
esac
