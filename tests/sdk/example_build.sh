# Sourced by install_and_run_hello.sh and build_and_run_seed.sh: an example
# program configured and built as a user builds it, against an installed rpcjob
# only. Needs: src, work, prefix, cmake, generator, cxx; optional: launcher,
# prefix_path (PATH-style, where this build found its own dependencies).

fail() { echo "FAIL: $*" >&2; exit 1; }

# configure_example NAME: examples/NAME into $work/build, find_package(rpcjob)
# from $prefix alone (no package registry); the log is $work/configure.log.
configure_example() {
  echo "== configure examples/$1 against $prefix"
  local args=(-S "$src/examples/$1" -B "$work/build" -G "$generator" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    "-DCMAKE_PREFIX_PATH=$prefix${prefix_path:+;${prefix_path//:/;}}")
  if [ -n "${launcher:-}" ] && [ -x "$launcher" ]; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher")
    export CCACHE_BASEDIR=$work  # a stable cache key although the work folder is new
  fi
  "$cmake" "${args[@]}" > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure"; }
}

# build_example NAME: the configured build; the log is $work/build.log.
build_example() {
  echo "== build examples/$1"
  "$cmake" --build "$work/build" -j2 > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build"; }
}
