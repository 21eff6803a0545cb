// rpcjob-bench: two local rpcjob-worker processes (rank 0 runs `bench`, rank 1
// serves) over loopback; prints our CPU figures beside the targets and,
// for the 400 MB round trip, the host's bound measured in the same run (the
// memory-copy bandwidth, memcpy_bound.h) and our share of it, and the same
// bound for the 4 MB round trip; then an RRef proxy call (rref.rpcSync of a
// remote object's method) beside rpcSync of a function.
// Beside ours, "TensorPipe alone": rpcjob-tp-floor (benchmarks/floor/), run in
// the same run, measures TensorPipe's own round trip between two processes with
// rpcjob's small-call bytes, no rpcjob code: the floor under ours. Its blocking
// figure (a thread waits for each echo, as rpcSync's caller does) stands beside
// our small calls, its chained one (no hand-off) in brackets; its burst (every
// message in flight at once, as our async figure) beside async calls/s, a
// 64-message window in brackets; its 4 MB round trip over cma (basic in
// brackets) beside ours.
// And "lane rings alone": rpcjob-lane-floor (benchmarks/floor/), the rings of
// rpcjob's shared-memory lane between two processes with every thread polling:
// the floor under our small and async figures once TensorPipe is out of their
// path (small calls and answers travel on the lane).
// Small calls and round trips call the built-in rpcjob.echo, which the runtime
// registers runInline (served on the thread that read the request: it neither
// blocks nor calls out). PyTorch's own RPC, measured the same way in the same
// run, is benchmarks/gpu/torch_rpc_bench.py; benchmarks/gpu/table.py prints both.
//
//   rpcjob-bench [--json] [--no-large] [--worker PATH] [--floor PATH] [--lane-floor PATH]
//                [--metrics [--rounds N] [--recorders observer,channels,transports]
//                           [--slice CALLS]]
//
// --floor, --lane-floor: rpcjob-tp-floor's and rpcjob-lane-floor's paths
// (default: beside this program's binary).
//
// --metrics: the metrics overhead instead (target: < 3 %), two ways.
//  1. Same processes: both workers with metrics on (RPCJOB_METRICS_FILE set: the
//     TensorPipe decorators and the RPC observer record, nothing is scraped), the
//     recorders paused and running in alternating phases, --rounds N (default 100)
//     rounds (`rpcjob-worker bench --metrics-overhead`, tools/metrics_overhead.h).
//     --recorders: switch only those (the others record in both states), to see
//     which costs what; then part 2 is skipped. --recorders none switches
//     nothing: the control, whose overhead should read 0 within its interval.
//     --slice: sync calls between switches (default 25; 500, one block per
//     state and round, was the design before, and is much noisier).
//     The figure to read: fresh processes differ by more than the effect.
//  2. Fresh process pairs without and with metrics, alternating, 5 each (small
//     calls and the async rate only): the end-to-end view, decorators absent vs
//     present; the medians and their range. Where the scheduler puts a pair's
//     threads moves its p50 by 20 % or more (pinning each worker to CPUs of its
//     own did not narrow that on the GPU host), so this is context, not the
//     figure: part 1 is.
//
// Exit codes: 0 success, 1 the workers or a floor program failed (ours is still
// printed when only a floor failed, its figures null) or a floor program is
// missing, 2 usage.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "memcpy_bound.h"
#include "rpcjob/assignment/port_reservation.h"
#include "rpcjob/metrics/recording.h"
#include "rpcjob/version.h"

namespace {

struct Figure {
  const char* key;
  const char* label;
  const char* target;  // issue 22's
};

// A floor program's keys and the ones they get in our JSON.
struct FloorKey {
  const char* floor;
  const char* ours;
};
const FloorKey kFloorKeys[] = {
    {"blocking_p50_us", "tp_small_rtt_p50_us"},
    {"blocking_p99_us", "tp_small_rtt_p99_us"},
    {"chained_p50_us", "tp_chained_rtt_p50_us"},
    {"chained_p99_us", "tp_chained_rtt_p99_us"},
    {"burst_msgs_per_s", "tp_async_msgs_per_s"},
    {"pipelined_msgs_per_s", "tp_pipelined_msgs_per_s"},
    {"pipelined_window", "tp_pipelined_window"},
    {"tensor_cma_ms", "tp_rtt_4mb_ms"},
    {"tensor_basic_ms", "tp_rtt_4mb_basic_ms"},
    {"payload_bytes", "tp_payload_bytes"},
};
// rpcjob-lane-floor's.
const FloorKey kLaneFloorKeys[] = {
    {"chained_p50_us", "lane_small_rtt_p50_us"},
    {"chained_p99_us", "lane_small_rtt_p99_us"},
    {"burst_msgs_per_s", "lane_async_msgs_per_s"},
    {"payload_bytes", "lane_payload_bytes"},
};

const Figure kFigures[] = {
    {"small_rtt_p50_us", "small call RTT p50 (us)", "<= 10"},
    {"small_rtt_p99_us", "small call RTT p99 (us)", "<= 25"},
    {"async_calls_per_s", "async calls/s, one caller", ">= 1000000"},
    {"async_batched_calls_per_s", "  the same in a CallBatch", ">= 1000000"},
    {"rtt_4mb_ms", "4 MB RTT (ms)", "<= 0.3"},
    {"rtt_400mb_ms", "400 MB RTT (ms)", ">= 80 % of bound"},
    {"gbps_400mb", "400 MB effective GB/s", ""},
    // The same with useSharedHostAllocator() in the caller: its tensor in the
    // shared arena, which rpcjob_cma copies with memcpy from a mapping; the
    // echo comes back from the server's arena either way (received tensors of
    // 4 MiB and more land there).
    {"rtt_4mb_shared_ms", "4 MB RTT, shared alloc (ms)", "<= 0.3"},
    {"rtt_400mb_shared_ms", "400 MB RTT, shared alloc", ">= 80 % of bound"},
    {"gbps_400mb_shared", "400 MB shared alloc GB/s", ""},
};

pid_t spawn(const std::string& binary, const std::string& peers, const std::string& name,
            const std::vector<std::string>& args, int stdoutFd) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("RPCJOB_PEERS=" + peers);
  env.push_back("RPCJOB_WORKER_NAME=" + name);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argvStore = {binary};
  argvStore.insert(argvStore.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argvStore) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    if (stdoutFd >= 0) dup2(stdoutFd, STDOUT_FILENO);
    execve(binary.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

// A round trip's bound in ms: its `bytes` copied twice at `bound`'s bandwidth
// (0: not measured).
double roundTripMs(const rpcjob::bench::CopyBound& bound, size_t bytes) {
  return bound.gbps > 0 ? 2.0 * bytes / (bound.gbps * 1e9) * 1e3 : 0;
}

// bound / measured: the share of the bound ours reaches (0 where either is missing).
double shareOf(double boundMs, double measuredMs) {
  return measuredMs > 0 && boundMs > 0 ? boundMs / measuredMs : 0;
}

double field(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return 0;
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

// A number of rpcjob-tp-floor's JSON as JSON text: "null" where it has none.
std::string floorValue(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return "null";
  const char* from = json.c_str() + at + key.size() + 3;
  char* end = nullptr;
  const double v = std::strtod(from, &end);
  if (end == from) return "null";
  char text[64];
  std::snprintf(text, sizeof(text), "%.15g", v);
  return text;
}

// A string of rpcjob-tp-floor's JSON (which has a space after each colon).
std::string floorString(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return "";
  auto start = json.find_first_not_of(' ', at + key.size() + 3);
  if (start == std::string::npos || json[start] != '"') return "";
  return json.substr(start + 1, json.find('"', start + 1) - start - 1);
}

// The "TensorPipe alone" cell of a figure's row: the floor for ours, and in
// brackets the variant that shows what the floor is made of.
std::string floorCell(const std::string& tp, const std::string& key) {
  const bool hasCell = key == "small_rtt_p50_us" || key == "small_rtt_p99_us" ||
                       key == "async_calls_per_s" || key == "rtt_4mb_ms";
  if (!hasCell) return "";
  if (tp.empty()) return "failed";
  char text[96];
  auto v = [&](const char* k) { return field(tp, k); };
  if (key == "small_rtt_p50_us") {
    std::snprintf(text, sizeof(text), "%.2f (chained %.2f)", v("blocking_p50_us"),
                  v("chained_p50_us"));
  } else if (key == "small_rtt_p99_us") {
    std::snprintf(text, sizeof(text), "%.2f (chained %.2f)", v("blocking_p99_us"),
                  v("chained_p99_us"));
  } else if (key == "async_calls_per_s") {
    std::snprintf(text, sizeof(text), "%.0f (W=%.0f: %.0f)", v("burst_msgs_per_s"),
                  v("pipelined_window"), v("pipelined_msgs_per_s"));
  } else if (floorValue(tp, "tensor_cma_ms") == "null") {  // 4 MB; cma not viable here
    std::snprintf(text, sizeof(text), "no cma (basic %.2f)", v("tensor_basic_ms"));
  } else {
    std::snprintf(text, sizeof(text), "%.2f (basic %.2f)", v("tensor_cma_ms"),
                  v("tensor_basic_ms"));
  }
  return text;
}

// Program `name` (rpcjob-tp-floor, rpcjob-lane-floor) beside this program's binary.
std::string besideSelf(const std::string& name) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return name;
  std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + name;
}

// Runs `binary --json` (a floor program); its JSON line, or empty when it failed (it says
// why on stderr).
std::string runFloor(const std::string& binary) {
  int out[2];
  if (pipe(out) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execl(binary.c_str(), binary.c_str(), "--json", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string result;
  char buffer[4096];
  for (ssize_t n; pid > 0 && (n = read(out[0], buffer, sizeof(buffer))) > 0;) {
    result.append(buffer, n);
  }
  close(out[0]);
  if (pid < 0) return "";
  int status = 0;
  waitpid(pid, &status, 0);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0 || result.find('{') == std::string::npos) {
    std::cerr << "rpcjob-bench: " << binary << " --json failed (exit code " << code
              << "): its figures are null\n";
    return "";
  }
  return result.substr(result.find('{'));
}

std::string stringField(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\":\"");
  if (at == std::string::npos) return "";
  auto start = at + key.size() + 4;
  return json.substr(start, json.find('"', start) - start);
}

int exitCode(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  bool metricsOverhead = false;
  int rounds = 100;
  std::string recorders = "all";
  std::string slice = "25";
  std::string worker = RPCJOB_WORKER_BINARY;
  std::string floorBinary = besideSelf("rpcjob-tp-floor");
  std::string laneFloorBinary = besideSelf("rpcjob-lane-floor");
  // Only the pair as configured (the default channels): the per-channel passes
  // of `rpcjob-worker bench` are for its own table.
  std::vector<std::string> benchArgs = {"bench", "--json", "--channels", "auto"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--no-large") {
      benchArgs.push_back("--no-large");
    } else if (arg == "--metrics") {
      metricsOverhead = true;
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
      if (rounds < 1) {
        std::cerr << "rpcjob-bench: --rounds needs a positive number\n";
        return 2;
      }
    } else if (arg == "--recorders" && i + 1 < argc) {
      recorders = argv[++i];
      unsigned mask = 0;
      if (!rpcjob::metrics::parseRecorders(recorders, mask)) {
        std::cerr << "rpcjob-bench: --recorders: a list of observer, channels, transports, all; "
                     "or none\n";
        return 2;
      }
    } else if (arg == "--slice" && i + 1 < argc) {
      slice = argv[++i];
      if (std::atoi(slice.c_str()) < 1) {
        std::cerr << "rpcjob-bench: --slice needs a positive number\n";
        return 2;
      }
    } else if (arg == "--worker" && i + 1 < argc) {
      worker = argv[++i];
    } else if (arg == "--floor" && i + 1 < argc) {
      floorBinary = argv[++i];
    } else if (arg == "--lane-floor" && i + 1 < argc) {
      laneFloorBinary = argv[++i];
    } else if (arg == "--version") {
      std::cout << "rpcjob-bench " << RPCJOB_VERSION_STRING << "\n";
      return 0;
    } else {
      std::cerr << "usage: rpcjob-bench [--json] [--no-large] [--worker PATH] [--floor PATH] "
                   "[--lane-floor PATH] [--metrics [--rounds N] [--recorders "
                   "observer,channels,transports] "
                   "[--slice CALLS]]\n";
      return 2;
    }
  }
  const std::vector<std::string> serveArgs = {"serve", "--deadline-s", "900"};
  auto runPairOnce = [&](std::string& result, const std::vector<std::string>& serverArgs,
                         const std::vector<std::string>& clientArgs) {
    const rpcjob::PortReservation ports(2);  // held until both workers have exited
    std::string peers = "bench0@127.0.0.1:" + std::to_string(ports.ports()[0]) +
                        ",bench1@127.0.0.1:" + std::to_string(ports.ports()[1]);
    int out[2];
    if (pipe(out) != 0) return false;
    pid_t server = spawn(worker, peers, "bench1", serverArgs, -1);
    pid_t client = spawn(worker, peers, "bench0", clientArgs, out[1]);
    close(out[1]);
    char buffer[4096];
    for (ssize_t n; (n = read(out[0], buffer, sizeof(buffer))) > 0;) result.append(buffer, n);
    close(out[0]);
    int clientCode = exitCode(client);
    int serverCode = exitCode(server);
    if (clientCode != 0 || serverCode != 0 || result.find('{') == std::string::npos) {
      std::cerr << "rpcjob-bench: workers failed (bench " << clientCode << ", serve " << serverCode
                << ")\n";
      return false;
    }
    return true;
  };
  // A failed pair is tried again on fresh ports, twice at most, and says so:
  // one bad pair should not cost a whole run on the GPU host. (The ports are
  // reserved while a pair runs, so another program can no longer take one.)
  auto runPair = [&](std::string& result, const std::vector<std::string>& serverArgs,
                     const std::vector<std::string>& clientArgs) {
    for (int attempt = 1; attempt <= 3; ++attempt) {
      result.clear();
      if (runPairOnce(result, serverArgs, clientArgs)) return true;
      if (attempt < 3) std::cerr << "rpcjob-bench: trying again on fresh ports\n";
    }
    return false;
  };
  if (metricsOverhead) {
    const std::string file = "/tmp/rpcjob-bench-metrics-" + std::to_string(getpid()) + ".prom";
    unsetenv("RPCJOB_METRICS_PORT");
    // 1. The same two processes, recorders paused and running.
    setenv("RPCJOB_METRICS_FILE", file.c_str(), 1);
    std::string same;
    const std::vector<std::string> overheadArgs = {
        "bench", "--metrics-overhead", std::to_string(rounds), "--recorders", recorders, "--slice",
        slice};
    if (!runPair(same, overheadArgs, overheadArgs)) return 1;
    same = same.substr(same.find('{'));
    same = same.substr(0, same.find('\n'));
    // 2. Fresh process pairs, off and on alternating so that drift in the
    // machine's load hits both alike.
    unsetenv("RPCJOB_METRICS_FILE");
    const bool fresh = recorders == "all";  // fresh pairs compare all or nothing
    std::vector<std::string> freshArgs = benchArgs;
    freshArgs.push_back("--no-large");
    constexpr int kPairs = 5;  // per state
    std::vector<double> pairP50[2], pairP99[2], pairRate[2];
    for (int round = 0; fresh && round < 2 * kPairs; ++round) {
      const int on = round % 2;
      if (on) {
        setenv("RPCJOB_METRICS_FILE", file.c_str(), 1);
      } else {
        unsetenv("RPCJOB_METRICS_FILE");
      }
      std::string result;
      if (!runPair(result, serveArgs, freshArgs)) return 1;
      pairP50[on].push_back(field(result, "small_rtt_p50_us"));
      pairP99[on].push_back(field(result, "small_rtt_p99_us"));
      pairRate[on].push_back(field(result, "async_calls_per_s"));
    }
    unsetenv("RPCJOB_METRICS_FILE");
    // Medians over the pairs of each state, and their range.
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    auto range = [](const std::vector<double>& v, int decimals = 1) {
      if (v.empty()) return std::string("-");
      char text[64];
      std::snprintf(text, sizeof(text), "%.*f-%.*f", decimals,
                    *std::min_element(v.begin(), v.end()), decimals,
                    *std::max_element(v.begin(), v.end()));
      return std::string(text);
    };
    const double p50[2] = {median(pairP50[0]), median(pairP50[1])};
    const double p99[2] = {median(pairP99[0]), median(pairP99[1])};
    const double rate[2] = {median(pairRate[0]), median(pairRate[1])};
    std::remove(file.c_str());
    // Overhead in percent: positive is slower with metrics on.
    const double o50 = (p50[1] / p50[0] - 1) * 100, o99 = (p99[1] / p99[0] - 1) * 100,
                 orate = (rate[0] / rate[1] - 1) * 100;
    // <key>[i] of the JSON line, the first after `section` (the overhead_pct
    // object: q1, median, q3; overhead_ci95: the median's 95 % interval).
    auto number = [&](const char* section, const char* key, int i) {
      const char* from = std::strstr(same.c_str(), section);
      const std::string k = std::string("\"") + key + "\": [";
      const char* at = from != nullptr ? std::strstr(from, k.c_str()) : nullptr;
      double v[3] = {0, 0, 0};
      if (at != nullptr) std::sscanf(at + k.size(), "%lf, %lf, %lf", &v[0], &v[1], &v[2]);
      return v[i];
    };
    auto pct = [&](const char* key, int i) { return number("", key, i); };
    auto ci = [&](const char* key, int i) { return number("\"overhead_ci95\"", key, i); };
    const double sameP50[2] = {pct("small_rtt_p50_us", 0), pct("small_rtt_p50_us", 1)};
    const double sameRate[2] = {pct("async_calls_per_s", 0), pct("async_calls_per_s", 1)};
    if (json && !fresh) {
      std::printf("{\"same_processes\": %s, \"fresh_processes\": null}\n", same.c_str());
    } else if (json) {
      std::printf(
          "{\"same_processes\": %s, \"fresh_processes\": {\"small_rtt_p50_us\": [%.2f, %.2f], "
          "\"small_rtt_p99_us\": [%.2f, %.2f], \"async_calls_per_s\": [%.0f, %.0f], "
          "\"overhead_pct\": {\"small_rtt_p50\": %.2f, \"small_rtt_p99\": %.2f, "
          "\"async_calls\": %.2f}}}\n",
          same.c_str(), p50[0], p50[1], p99[0], p99[1], rate[0], rate[1], o50, o99, orate);
    } else {
      std::printf("rpcjob %s, metrics overhead, 2 local processes, small calls\n\n",
                  RPCJOB_VERSION_STRING);
      std::printf(
          "Same processes, recorders (%s) paused vs recording, %d rounds, switched every %s\n"
          "sync calls (medians; overhead: median of the per-round ratios, its 95 %% confidence\n"
          "interval, and their quartiles):\n",
          recorders.c_str(), rounds, slice.c_str());
      std::printf("%-28s %10s %10s %9s %17s %17s\n", "measurement", "paused", "recording",
                  "overhead", "95% CI", "quartiles");
      std::printf("%-28s %10.2f %10.2f %8.2f%% %7.2f .. %5.2f%% %7.2f .. %5.2f%%\n",
                  "small call RTT p50 (us)", sameP50[0], sameP50[1], pct("small_rtt_p50", 1),
                  ci("small_rtt_p50", 0), ci("small_rtt_p50", 1), pct("small_rtt_p50", 0),
                  pct("small_rtt_p50", 2));
      std::printf("%-28s %10.0f %10.0f %8.2f%% %7.2f .. %5.2f%% %7.2f .. %5.2f%%\n",
                  "async calls/s, one caller", sameRate[0], sameRate[1], pct("async_calls", 1),
                  ci("async_calls", 0), ci("async_calls", 1), pct("async_calls", 0),
                  pct("async_calls", 2));
    }
    if (!json && fresh) {
      std::printf(
          "\nFresh process pairs, metrics absent vs present, %d each (medians over the pairs,\n"
          "and their range: where the scheduler puts a pair's threads moves its figures by more\n"
          "than the effect, so read the same-process figures above):\n",
          kPairs);
      std::printf("%-28s %12s %12s %10s %14s %14s\n", "measurement", "absent", "present",
                  "overhead", "absent range", "present range");
      std::printf("%-28s %12.2f %12.2f %9.2f%% %16s %16s\n", "small call RTT p50 (us)", p50[0],
                  p50[1], o50, range(pairP50[0]).c_str(), range(pairP50[1]).c_str());
      std::printf("%-28s %12.2f %12.2f %9.2f%% %16s %16s\n", "small call RTT p99 (us)", p99[0],
                  p99[1], o99, range(pairP99[0]).c_str(), range(pairP99[1]).c_str());
      std::printf("%-28s %12.0f %12.0f %9.2f%% %16s %16s\n", "async calls/s, one caller", rate[0],
                  rate[1], orate, range(pairRate[0], 0).c_str(), range(pairRate[1], 0).c_str());
    }
    if (!json) {
      std::printf("(target: under 3 %% on p50 and async calls/s; positive: slower with metrics)\n");
    }
    return 0;
  }
  const auto missing = [](const std::string& binary, const char* target, const char* option) {
    if (access(binary.c_str(), X_OK) == 0) return false;
    std::cerr << "rpcjob-bench: the floor program " << binary << " is missing (build the " << target
              << " target, which sits beside rpcjob-bench, or name it with " << option
              << " PATH)\n";
    return true;
  };
  if (missing(floorBinary, "rpcjob-tp-floor", "--floor") ||
      missing(laneFloorBinary, "rpcjob-lane-floor", "--lane-floor")) {
    return 1;
  }
  // The round trips' bounds, before the workers start (nothing else competes
  // for memory bandwidth then). 4 MB copies take a fraction of a millisecond:
  // many more rounds than 400 MB's, for a best that is not one noisy sample.
  const size_t kMidBytes = size_t{1} << 22;  // the 4 MB round trip's: 1 << 20 float32
  const int kMidRounds = 50;
  const rpcjob::bench::CopyBound copy4 =
      rpcjob::bench::measureCopyBound(kMidBytes, rpcjob::bench::copyChannelThreads(), kMidRounds);
  const rpcjob::bench::CopyBound pool4 = rpcjob::bench::measureCopyBoundPooled(
      kMidBytes, rpcjob::bench::copyChannelThreads(), kMidRounds);
  const rpcjob::bench::CopyBound pingPong4 = rpcjob::bench::measureCopyPingPong(
      kMidBytes, rpcjob::bench::copyChannelThreads(), kMidRounds);
  const rpcjob::bench::CopyBound cma4 =
      rpcjob::bench::measureCmaCopy(kMidBytes, rpcjob::bench::copyChannelThreads(), kMidRounds);
  const bool large = std::find(benchArgs.begin(), benchArgs.end(), "--no-large") == benchArgs.end();
  const size_t kLargeBytes = 400 * 1000 * 1000;
  const rpcjob::bench::CopyBound copy =
      large ? rpcjob::bench::measureCopyBound(kLargeBytes, rpcjob::bench::copyChannelThreads())
            : rpcjob::bench::CopyBound{};
  const rpcjob::bench::CopyBound cma =
      large ? rpcjob::bench::measureCmaCopy(kLargeBytes, rpcjob::bench::copyChannelThreads())
            : rpcjob::bench::CopyBound{};
  std::string result;
  if (!runPair(result, serveArgs, benchArgs)) return 1;
  // TensorPipe alone and the lane's rings alone, right after ours (never beside
  // it: all of them spin).
  const std::string tp = runFloor(floorBinary);
  const std::string lane = runFloor(laneFloorBinary);
  const double rtt400 = field(result, "rtt_400mb_ms");
  const double boundMs = roundTripMs(copy, kLargeBytes);
  const double ofBound = shareOf(boundMs, rtt400);
  const double cmaMs = roundTripMs(cma, kLargeBytes);
  const double ofCma = shareOf(cmaMs, rtt400);
  const double rtt4 = field(result, "rtt_4mb_ms");
  const double bound4Ms = roundTripMs(copy4, kMidBytes);
  const double ofBound4 = shareOf(bound4Ms, rtt4);
  const double cma4Ms = roundTripMs(cma4, kMidBytes);
  const double ofCma4 = shareOf(cma4Ms, rtt4);
  // Ours with the caller's tensor in the arena, against the same bounds; the
  // 4 MB one also against the bound with threads started beforehand.
  const double rtt400Shared = field(result, "rtt_400mb_shared_ms");
  const double ofBoundShared = shareOf(boundMs, rtt400Shared);
  const double rtt4Shared = field(result, "rtt_4mb_shared_ms");
  const double ofBound4Shared = shareOf(bound4Ms, rtt4Shared);
  const double pool4Ms = roundTripMs(pool4, kMidBytes);
  const double ofPool4 = shareOf(pool4Ms, rtt4);
  const double ofPool4Shared = shareOf(pool4Ms, rtt4Shared);
  const double pingPong4Ms = roundTripMs(pingPong4, kMidBytes);
  const double ofPingPong4 = shareOf(pingPong4Ms, rtt4);
  const double ofPingPong4Shared = shareOf(pingPong4Ms, rtt4Shared);
  if (json) {
    std::cout << "{";
    for (size_t i = 0; i < std::size(kFigures); ++i) {
      std::cout << (i ? ", " : "") << "\"" << kFigures[i].key
                << "\": " << field(result, kFigures[i].key);
    }
    std::cout << ", \"memcpy_gbps\": " << copy.gbps << ", \"memcpy_threads\": " << copy.threads
              << ", \"rtt_400mb_bound_ms\": " << boundMs << ", \"rtt_400mb_of_bound\": " << ofBound
              << ", \"cma_gbps\": " << cma.gbps << ", \"cma_threads\": " << cma.threads
              << ", \"rtt_400mb_cma_ms\": " << cmaMs << ", \"rtt_400mb_of_cma\": " << ofCma;
    std::cout << ", \"function_call_p50_us\": " << field(result, "function_call_p50_us")
              << ", \"proxy_call_p50_us\": " << field(result, "proxy_call_p50_us");
    std::cout << ", \"channel\": \"" << stringField(result, "channel") << "\", \"transport\": \""
              << stringField(result, "transport") << "\"";
    // Which way each leg's bytes went (pair_bench.h's PairResult::path4mb): a
    // 400 MB round trip at process_vm_readv's speed says which leg took it.
    std::cout << ", \"path_4mb\": \"" << stringField(result, "path_4mb") << "\", \"path_400mb\": \""
              << stringField(result, "path_400mb") << "\"";
    std::cout << ", \"faults_400mb\": " << field(result, "faults_400mb")
              << ", \"peer_faults_400mb\": " << field(result, "peer_faults_400mb");
    std::cout << ", \"rtt_4mb_bound_ms\": " << bound4Ms << ", \"rtt_4mb_of_bound\": " << ofBound4
              << ", \"memcpy_4mb_gbps\": " << copy4.gbps
              << ", \"memcpy_4mb_threads\": " << copy4.threads << ", \"rtt_4mb_cma_ms\": " << cma4Ms
              << ", \"rtt_4mb_of_cma\": " << ofCma4 << ", \"cma_4mb_gbps\": " << cma4.gbps
              << ", \"cma_4mb_threads\": " << cma4.threads;
    std::cout << ", \"rtt_400mb_shared_of_bound\": " << ofBoundShared
              << ", \"rtt_4mb_shared_of_bound\": " << ofBound4Shared
              << ", \"memcpy_4mb_pool_gbps\": " << pool4.gbps
              << ", \"memcpy_4mb_pool_threads\": " << pool4.threads
              << ", \"rtt_4mb_pool_bound_ms\": " << pool4Ms
              << ", \"rtt_4mb_of_pool_bound\": " << ofPool4
              << ", \"rtt_4mb_shared_of_pool_bound\": " << ofPool4Shared
              << ", \"rtt_4mb_pingpong_bound_ms\": " << pingPong4Ms
              << ", \"memcpy_4mb_pingpong_threads\": " << pingPong4.threads
              << ", \"rtt_4mb_of_pingpong_bound\": " << ofPingPong4
              << ", \"rtt_4mb_shared_of_pingpong_bound\": " << ofPingPong4Shared;
    for (const auto& k : kFloorKeys) {
      std::cout << ", \"" << k.ours << "\": " << floorValue(tp, k.floor);
    }
    const std::string tpTransport = floorString(tp, "transport");
    std::cout << ", \"tp_transport\": "
              << (tpTransport.empty() ? "null" : "\"" + tpTransport + "\"");
    for (const auto& k : kLaneFloorKeys) {
      std::cout << ", \"" << k.ours << "\": " << floorValue(lane, k.floor);
    }
    std::cout << "}\n";
    return tp.empty() || lane.empty() ? 1 : 0;
  }
  std::printf("rpcjob %s, CPU tensors, 2 local processes, channel %s over %s\n",
              RPCJOB_VERSION_STRING, stringField(result, "channel").c_str(),
              stringField(result, "transport").c_str());
  std::printf("%-28s %14s %24s %18s\n", "measurement", "rpcjob", "TensorPipe alone",
              "target (issue 22)");
  for (const auto& f : kFigures) {
    std::printf("%-28s %14.2f %24s %18s\n", f.label, field(result, f.key),
                floorCell(tp, f.key).c_str(), f.target);
  }
  if (boundMs > 0) {
    std::printf(
        "400 MB bound (same run): %.2f ms = 2 x 400 MB at %.2f GB/s, this host's best copy\n"
        "(memcpy, %d thread(s); a round trip copies the bytes twice); ours: %.0f %% of it\n",
        boundMs, copy.gbps, copy.threads, ofBound * 100);
  }
  std::printf("copy paths: 4 MB %s; 400 MB %s\n", stringField(result, "path_4mb").c_str(),
              stringField(result, "path_400mb").c_str());
  if (cmaMs > 0) {
    std::printf(
        "process_vm_readv alone (same run; rpcjob_cma's copy, not the bound): %.2f ms = 2 x "
        "400 MB\nat %.2f GB/s (%d thread(s)); ours: %.0f %% of it\n",
        cmaMs, cma.gbps, cma.threads, ofCma * 100);
  }
  if (bound4Ms > 0) {
    std::printf(
        "4 MB bound (same run): %.3f ms = 2 x 4 MiB at %.2f GB/s (memcpy, %d thread(s));\n"
        "ours: %.0f %% of it; process_vm_readv alone %.3f ms (%.2f GB/s, %d thread(s)): "
        "ours %.0f %% of it\n",
        bound4Ms, copy4.gbps, copy4.threads, ofBound4 * 100, cma4Ms, cma4.gbps, cma4.threads,
        ofCma4 * 100);
  }
  if (boundMs > 0 && rtt400Shared > 0) {
    std::printf("400 MB with useSharedHostAllocator() in the caller: %.0f %% of the bound\n",
                ofBoundShared * 100);
  }
  if (pool4Ms > 0) {
    std::printf(
        "4 MB bound with threads started beforehand (spinning): %.3f ms (%.2f GB/s, %d "
        "thread(s));\nours: %.0f %% of it, with useSharedHostAllocator() in the caller: %.0f %% "
        "(%.0f %% of the bound above)\n",
        pool4Ms, pool4.gbps, pool4.threads, ofPool4 * 100, ofPool4Shared * 100,
        ofBound4Shared * 100);
  }
  if (pingPong4Ms > 0) {
    std::printf(
        "4 MB round trip's copies alone (two spinning groups of %d thread(s) passing 4 MiB\n"
        "back and forth, each reading what the other just wrote): %.3f ms; ours: %.0f %% of it,\n"
        "with useSharedHostAllocator() in the caller: %.0f %%; the rest is the messages around\n"
        "the copies%s\n",
        pingPong4.threads, pingPong4Ms, ofPingPong4 * 100, ofPingPong4Shared * 100,
        pingPong4.threads < rpcjob::bench::copyChannelThreads()
            ? " (not a bound here: too few cores for two groups of rpcjob_cma's threads)"
            : "");
  }
  if (!tp.empty()) {
    std::printf(
        "TensorPipe alone (rpcjob-tp-floor, same run, no rpcjob code): %s-byte messages (our\n"
        "small call's) over %s, echoed from the server's read callback; small calls: a thread\n"
        "waits for each echo (chained: the next write from the read callback, no hand-off);\n"
        "async: all in flight at once (W: a window); 4 MB: cma (basic over the transport)\n",
        floorValue(tp, "payload_bytes").c_str(), floorString(tp, "transport").c_str());
  }
  if (!lane.empty()) {
    std::printf(
        "lane rings alone (rpcjob-lane-floor, same run, no runtime): a round trip %.2f us p50\n"
        "(%.2f p99), %.0f messages/s all in flight: ours takes %.1fx the round trip and %.0f %% "
        "of\nthe rate\n",
        field(lane, "chained_p50_us"), field(lane, "chained_p99_us"),
        field(lane, "burst_msgs_per_s"),
        field(result, "small_rtt_p50_us") / std::max(field(lane, "chained_p50_us"), 1e-9),
        100 * field(result, "async_calls_per_s") / std::max(field(lane, "burst_msgs_per_s"), 1.0));
  }
  std::printf(
      "(calls: the built-in rpcjob.echo, registered runInline; PyTorch's RPC measured the same\n"
      "way: benchmarks/gpu/torch_rpc_bench.py, beside ours in benchmarks/gpu/table.py)\n\n");
  // RRef proxies against plain calls, same run, calls interleaved.
  const double function = field(result, "function_call_p50_us");
  const double proxy = field(result, "proxy_call_p50_us");
  std::printf("%-28s %14s %14s %10s\n", "small call p50 (us)", "rpcSync(fn)", "rref.rpcSync",
              "proxy cost");
  std::printf("%-28s %14.2f %14.2f %+9.1f%%\n", "function vs object method", function, proxy,
              function > 0 ? (proxy / function - 1) * 100 : 0.0);
  std::printf("(target: the proxy at most +10 %% at p50)\n");
  return tp.empty() || lane.empty() ? 1 : 0;
}
