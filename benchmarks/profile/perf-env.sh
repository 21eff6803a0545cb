# Sourced by the profile scripts here: $OUT (PWD/perf-out unless set), made; $perf,
# the perf to run (PERF, else build-perf/perf with its libraries from perf-deps.sh,
# else the PATH's); perf_events, the event to sample on: cycles where the machine
# counts them, else cpu-clock (the GPU hosts' guests did not).
OUT=${OUT:-$PWD/perf-out}
mkdir -p "$OUT"
perf=${PERF:-$PWD/build-perf/perf}
[[ -x $perf ]] || perf=$(command -v perf)
[[ -d $PWD/build-perf/lib ]] && export LD_LIBRARY_PATH=$PWD/build-perf/lib:${LD_LIBRARY_PATH:-}
perf_events() {
  if "$perf" stat -x, -e cycles -- true 2>&1 | grep -q "not supported"; then
    echo cpu-clock
  else
    echo cycles
  fi
}
