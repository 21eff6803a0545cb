# rpcjob-worker, CUDA variant: built against the libtorch (and its TensorPipe, which
# carries the CUDA channels) inside an installed PyTorch, with the CUDA toolkit.
# Not built by the tests here (no GPU, and the base images are large); see docker/README.md.
#
#   buildah bud -f docker/worker-cuda.Dockerfile \
#     --build-arg BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel \
#     --build-arg RUNTIME_IMAGE=pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime \
#     --build-arg VERSION=$(cat VERSION) -t rpcjob-worker:$(cat VERSION)-cuda .
#
# BASE_IMAGE must have: a CUDA toolkit (nvcc), python3 with torch importable, and apt
# (Debian or Ubuntu). RUNTIME_IMAGE must have the same torch (same path) and CUDA runtime.
ARG BASE_IMAGE
ARG RUNTIME_IMAGE=${BASE_IMAGE}

FROM ${BASE_IMAGE} AS build
ARG JOBS=8
# Debian/Ubuntu package names of the build tools and the non-torch libraries.
ARG BUILD_PACKAGES="g++ cmake ninja-build pkg-config libyaml-cpp-dev prometheus-cpp-dev zlib1g-dev libcurl4-openssl-dev"
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $BUILD_PACKAGES \
 && rm -rf /var/lib/apt/lists/*
COPY . /src
RUN set -e; \
    TORCH_DIR=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))'); \
    cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DRPCJOB_WITH_CUDA=ON -DRPCJOB_BUILD_OPERATOR=OFF -DRPCJOB_BUILD_TESTS=OFF -DRPCJOB_BUILD_BENCHMARKS=ON \
      -DCMAKE_PREFIX_PATH="$TORCH_DIR/share/cmake" \
      -DCMAKE_INSTALL_RPATH="/usr/local/lib;$TORCH_DIR/lib"; \
    cmake --build /build --target rpcjob-worker rpcjob-bench rpcjob-launch -j"$JOBS"; \
    /src/docker/stage.sh worker /src /build /out

FROM ${RUNTIME_IMAGE}
ARG VERSION=0.0.0-dev
ARG SOURCE_URL=https://github.com/rpcjob/rpcjob
LABEL org.opencontainers.image.title="rpcjob-worker-cuda" \
      org.opencontainers.image.description="rpcjob RPC runtime (TensorPipe + libtorch, CUDA)" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# Only the dpkg-owned libraries (yaml-cpp, prometheus-cpp, ...); libtorch comes with the base.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(cat /tmp/runtime-packages.txt) \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && (getent passwd 65532 >/dev/null || echo 'rpcjob:x:65532:65532:rpcjob:/home/rpcjob:/usr/sbin/nologin' >> /etc/passwd) \
 && (getent group 65532 >/dev/null || echo 'rpcjob:x:65532:' >> /etc/group) \
 && mkdir -p /home/rpcjob && chown 65532:65532 /home/rpcjob
COPY --from=build /out/root/ /
RUN ldconfig && rpcjob-worker --version
ENV RPCJOB_EXAMPLES=/usr/local/share/rpcjob/examples
WORKDIR /home/rpcjob
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rpcjob-worker"]
CMD ["serve"]
