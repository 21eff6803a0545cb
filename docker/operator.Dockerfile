# rpcjob-operator image. Build from the repository root:
#   buildah bud -f docker/operator.Dockerfile --build-arg VERSION=$(cat VERSION) -t rpcjob-operator .
# (docker build works the same). See docker/README.md for the build arguments.
ARG BASE_IMAGE=debian:bookworm-slim

# ---- build stage: compilers and -dev packages; no libtorch (the operator never links it)
FROM ${BASE_IMAGE} AS build
ARG DEBIAN_MIRROR=""
ARG DEBIAN_SECURITY_MIRROR=""
ARG JOBS=2
COPY docker/apt-sources.sh /usr/local/sbin/rpcjob-apt-sources
RUN rpcjob-apt-sources "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR" \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      g++ cmake ninja-build pkg-config libcpprest-dev libyaml-cpp-dev prometheus-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DRPCJOB_BUILD_WORKER=OFF -DRPCJOB_BUILD_TESTS=OFF -DRPCJOB_BUILD_BENCHMARKS=OFF \
 && cmake --build /build --target rpcjob-operator -j"$JOBS" \
 && /src/docker/stage.sh operator /src /build /out

# ---- runtime stage: the binary and the runtime libraries it loads, nothing else
FROM ${BASE_IMAGE}
ARG DEBIAN_MIRROR=""
ARG DEBIAN_SECURITY_MIRROR=""
ARG VERSION=0.0.0-dev
ARG SOURCE_URL=https://github.com/rpcjob/rpcjob
LABEL org.opencontainers.image.title="rpcjob-operator" \
      org.opencontainers.image.description="Kubernetes operator for RpcJob (PyTorch-style RPC jobs in C++)" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.version="${VERSION}"
COPY docker/apt-sources.sh /usr/local/sbin/rpcjob-apt-sources
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN rpcjob-apt-sources "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR" \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(cat /tmp/runtime-packages.txt) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/runtime-packages.txt /usr/local/sbin/rpcjob-apt-sources \
 && echo 'rpcjob:x:65532:65532:rpcjob:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'rpcjob:x:65532:' >> /etc/group
COPY --from=build /out/root/ /
RUN ldconfig && rpcjob-operator --version
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rpcjob-operator"]
