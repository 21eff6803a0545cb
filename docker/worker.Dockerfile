# rpcjob-worker image: rpcjob-worker, rpcjob-bench, the runtime's shared library and
# headers (build your own workers FROM it: docker/README.md) and the examples.
# Build from the repository root:
#   buildah bud -f docker/worker.Dockerfile --build-arg VERSION=$(cat VERSION) -t rpcjob-worker .
ARG BASE_IMAGE=debian:bookworm-slim

# ---- build stage: Debian's libtorch and TensorPipe (CPU); the CUDA image is worker-cuda.Dockerfile
FROM ${BASE_IMAGE} AS build
ARG DEBIAN_MIRROR=""
ARG DEBIAN_SECURITY_MIRROR=""
ARG JOBS=2
COPY docker/apt-sources.sh /usr/local/sbin/rpcjob-apt-sources
RUN rpcjob-apt-sources "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR" \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      g++ cmake ninja-build pkg-config libtensorpipe-dev libtorch-dev libyaml-cpp-dev prometheus-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
# BUILD_SHARED_LIBS: the runtime ships as a shared library others link against.
RUN cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DRPCJOB_BUILD_OPERATOR=OFF -DRPCJOB_BUILD_TESTS=OFF -DRPCJOB_BUILD_BENCHMARKS=ON \
 && cmake --build /build --target rpcjob-worker rpcjob-bench rpcjob-launch -j"$JOBS" \
 && /src/docker/stage.sh worker /src /build /out

# ---- runtime stage: the runtime libraries (libtorch, TensorPipe, ...) without -dev packages
FROM ${BASE_IMAGE}
ARG DEBIAN_MIRROR=""
ARG DEBIAN_SECURITY_MIRROR=""
ARG VERSION=0.0.0-dev
ARG SOURCE_URL=https://github.com/rpcjob/rpcjob
LABEL org.opencontainers.image.title="rpcjob-worker" \
      org.opencontainers.image.description="rpcjob RPC runtime (TensorPipe + libtorch, CPU): rpcjob-worker, rpcjob-bench, librpcjob_runtime" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.version="${VERSION}"
COPY docker/apt-sources.sh /usr/local/sbin/rpcjob-apt-sources
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN rpcjob-apt-sources "$DEBIAN_MIRROR" "$DEBIAN_SECURITY_MIRROR" \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(cat /tmp/runtime-packages.txt) \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/runtime-packages.txt /usr/local/sbin/rpcjob-apt-sources \
 && echo 'rpcjob:x:65532:65532:rpcjob:/home/rpcjob:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'rpcjob:x:65532:' >> /etc/group \
 && mkdir -p /home/rpcjob && chown 65532:65532 /home/rpcjob
COPY --from=build /out/root/ /
RUN ldconfig && rpcjob-worker --version
ENV RPCJOB_EXAMPLES=/usr/local/share/rpcjob/examples
WORKDIR /home/rpcjob
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rpcjob-worker"]
CMD ["serve"]
