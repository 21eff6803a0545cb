#include "rpcjob/runner/cli.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "rpcjob/api/names.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/assignment/assignment.h"
#include "rpcjob/assignment/intra_op_threads.h"
#include "rpcjob/assignment/port_reservation.h"
#include "rpcjob/planner/cluster_yaml.h"
#include "rpcjob/planner/plan.h"
#include "rpcjob/planner/render.h"
#include "rpcjob/runner/job_secret.h"
#include "rpcjob/runner/launch.h"
#include "rpcjob/runner/local_machine.h"
#include "rpcjob/runner/summary.h"
#include "rpcjob/runner/supervisor.h"
#include "rpcjob/version.h"

namespace rpcjob::runner {
namespace {

namespace fs = std::filesystem;

const char* const kUsage =
    "usage: rpcjob validate JOB.yaml\n"
    "       rpcjob plan JOB.yaml --nodes NODES.yaml [--output table|yaml]\n"
    "       rpcjob plan JOB.yaml --local [--gpus N] [--gpu-topology TOPO.txt] [--output ...]\n"
    "       rpcjob run JOB.yaml [--worker-binary PATH] [--run-dir DIR] [--first-port N]\n"
    "                           [--gpus N] [--grace-period SECONDS]\n"
    "       rpcjob --version\n";

int usage(const std::string& problem = "") {
  if (!problem.empty()) std::cerr << "rpcjob: " << problem << "\n";
  std::cerr << kUsage;
  return kExitUsage;
}

std::optional<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Command-line options: positional arguments and --flag VALUE pairs.
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> flags;
  std::string error;
};

// `switches` take no value (present: "true").
Args parseArgs(const std::vector<std::string>& args, const std::vector<std::string>& known,
               const std::vector<std::string>& switches = {}) {
  Args out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      out.positional.push_back(a);
      continue;
    }
    std::string name = a, value;
    const auto eq = a.find('=');
    if (std::find(switches.begin(), switches.end(), a) != switches.end()) {
      out.flags[a] = "true";
      continue;
    }
    if (eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      out.error = a + " needs a value";
      return out;
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      out.error = "unknown option " + name;
      return out;
    }
    out.flags[name] = value;
  }
  return out;
}

std::optional<long> parseNumber(const std::string& text, long min, long max) {
  try {
    std::size_t used = 0;
    const long v = std::stol(text, &used);
    if (used == text.size() && v >= min && v <= max) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The manifest, parsed and validated; nullopt (errors printed) when not valid.
std::optional<api::RpcJob> loadJob(const std::string& path) {
  const auto text = readFile(path);
  if (!text) {
    std::cerr << "rpcjob: cannot read " << path << "\n";
    return std::nullopt;
  }
  api::ParseResult parsed = api::parseRpcJob(*text);
  if (!parsed.ok()) {
    std::cerr << path << ": invalid RpcJob (" << parsed.errors.size() << " error"
              << (parsed.errors.size() == 1 ? "" : "s") << "):\n";
    for (const auto& e : parsed.errors) std::cerr << "  " << e.toString() << "\n";
    return std::nullopt;
  }
  return parsed.job;
}

int cmdValidate(const std::vector<std::string>& rest) {
  const Args args = parseArgs(rest, {});
  if (!args.error.empty()) return usage(args.error);
  if (args.positional.size() != 1) return usage("validate takes one manifest");
  const auto job = loadJob(args.positional[0]);
  if (!job) return kExitUsage;
  std::cout << args.positional[0] << ": valid RpcJob " << job->metadata.name << " ("
            << api::totalWorkers(job->spec) << " workers in " << job->spec.workers.size()
            << " group(s))\n";
  return kExitOk;
}

// `rpcjob plan --local`: the plan `rpcjob run` would make on this machine, with the
// GPU topology NVML reports or one recorded with `nvidia-smi topo -m`.
int cmdPlanLocal(const Args& args, const api::RpcJob& job, const std::string& output) {
  std::optional<int> gpus;
  if (args.flags.count("--gpus")) {
    const auto n = parseNumber(args.flags.at("--gpus"), 0, 1024);
    if (!n) return usage("--gpus takes a count >= 0");
    gpus = static_cast<int>(*n);
  }
  LocalResources local = detectLocalResources(gpus);
  if (args.flags.count("--gpu-topology")) {
    const std::string path = args.flags.at("--gpu-topology");
    const auto text = readFile(path);
    if (!text) {
      std::cerr << "rpcjob: cannot read " << path << "\n";
      return kExitUsage;
    }
    std::string error;
    const auto topology = planner::parseTopoMatrix(*text, error);
    if (!topology) {
      std::cerr << path << ": not a GPU topology: " << error << "\n";
      return kExitUsage;
    }
    local.topology = *topology;
    local.topology.source = path;
    if (!gpus) local.gpus = topology->gpus;
  }
  std::cout << "# GPU topology: " << planner::describeTopology(local.topology) << "\n";
  planner::PlanOptions options;
  options.target = planner::Target::Local;
  planner::ClusterView cluster =
      planner::localCluster(local.gpus, local.cpuMilli, local.memoryBytes);
  cluster.nodes[0].gpuTopology = local.topology;
  const planner::Plan plan = planner::planJob(job, cluster, options);
  std::cout << (output == "yaml" ? planner::renderYaml(plan) : planner::renderTable(plan));
  if (!plan.planned()) {
    std::cerr << "rpcjob: " << job.metadata.name << " is " << toString(plan.outcome) << ": "
              << plan.message << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

int cmdPlan(const std::vector<std::string>& rest) {
  const Args args =
      parseArgs(rest, {"--nodes", "--output", "--gpus", "--gpu-topology"}, {"--local"});
  if (!args.error.empty()) return usage(args.error);
  if (args.positional.size() != 1) return usage("plan takes one manifest");
  const bool local = args.flags.count("--local") > 0;
  if (!args.flags.count("--nodes") && !local) {
    return usage("plan needs --nodes NODES.yaml, or --local for this machine");
  }
  if (args.flags.count("--nodes") && local) return usage("plan takes --nodes or --local, not both");
  if (!local && (args.flags.count("--gpus") || args.flags.count("--gpu-topology"))) {
    return usage("--gpus and --gpu-topology go with --local");
  }
  const std::string output = args.flags.count("--output") ? args.flags.at("--output") : "table";
  if (output != "table" && output != "yaml") return usage("--output is table or yaml");
  const auto job = loadJob(args.positional[0]);
  if (!job) return kExitUsage;
  if (local) return cmdPlanLocal(args, *job, output);
  const std::string nodesPath = args.flags.at("--nodes");
  const auto nodesText = readFile(nodesPath);
  if (!nodesText) {
    std::cerr << "rpcjob: cannot read " << nodesPath << "\n";
    return kExitUsage;
  }
  const planner::ClusterParseResult cluster = planner::parseClusterYaml(*nodesText);
  if (!cluster.ok()) {
    std::cerr << nodesPath << ": invalid cluster description:\n";
    for (const auto& e : cluster.errors) std::cerr << "  " << e.toString() << "\n";
    return kExitUsage;
  }
  const planner::Plan plan = planner::planJob(*job, cluster.cluster);
  std::cout << (output == "yaml" ? planner::renderYaml(plan) : planner::renderTable(plan));
  if (!plan.planned()) {
    std::cerr << "rpcjob: " << job->metadata.name << " is " << toString(plan.outcome) << ": "
              << plan.message << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

// The worker program: --worker-binary, else next to rpcjob in the build tree
// (build/runner/rpcjob -> build/worker/rpcjob-worker) or in the same directory
// (installed), else the name for a PATH lookup.
std::string resolveWorkerBinary(const std::string& flag) {
  if (!flag.empty()) return fs::absolute(flag).string();
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& candidate :
         {self.parent_path() / "../worker" / kWorkerProgram, self.parent_path() / kWorkerProgram}) {
      if (access(candidate.c_str(), X_OK) == 0) return fs::weakly_canonical(candidate).string();
    }
  }
  return kWorkerProgram;
}

std::string makeRunDir(const std::string& flag, const std::string& job) {
  if (!flag.empty()) {
    fs::create_directories(flag);
    return fs::absolute(flag).string();
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rpcjob-" + job + "-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("cannot create a run directory " + pattern);
  return pattern;
}

int cmdRun(const std::vector<std::string>& rest) {
  const Args args =
      parseArgs(rest, {"--worker-binary", "--run-dir", "--first-port", "--gpus", "--grace-period"});
  if (!args.error.empty()) return usage(args.error);
  if (args.positional.size() != 1) return usage("run takes one manifest");
  std::optional<int> gpus;
  if (args.flags.count("--gpus")) {
    const auto n = parseNumber(args.flags.at("--gpus"), 0, 1024);
    if (!n) return usage("--gpus takes a count >= 0");
    gpus = static_cast<int>(*n);
  }
  std::optional<long> firstPort;
  if (args.flags.count("--first-port")) {
    firstPort = parseNumber(args.flags.at("--first-port"), 1, 65535);
    if (!firstPort) return usage("--first-port takes a port 1..65535");
  }
  long grace = 5;
  if (args.flags.count("--grace-period")) {
    const auto g = parseNumber(args.flags.at("--grace-period"), 0, 3600);
    if (!g) return usage("--grace-period takes seconds 0..3600");
    grace = *g;
  }
  const auto job = loadJob(args.positional[0]);
  if (!job) return kExitUsage;
  const std::string& name = job->metadata.name;

  // The machine as the planner's one node.
  const LocalResources local = detectLocalResources(gpus);
  std::cout << "rpcjob: this machine: " << local.cpuMilli / 1000.0 << " CPUs, "
            << formatBytes(static_cast<double>(local.memoryBytes)) << ", " << local.gpus
            << " GPUs (" << local.gpuSource << ")\n";
  if (local.gpus > 1 || local.topology.known()) {
    std::cout << "rpcjob: GPU topology: " << planner::describeTopology(local.topology) << "\n";
  }

  // Ports: rank r listens on rpc[r]; metrics on metrics[r] (none when the job
  // turns metrics off).
  const int workers = api::totalWorkers(job->spec);
  const bool metricsOn = job->spec.metrics.port != 0;
  std::vector<int> ports;
  std::optional<PortReservation> reserved;  // held until the job ends (port_reservation.h)
  if (firstPort) {
    if (*firstPort + 2 * workers > 65536) return usage("--first-port too high for this job");
    // Ports given by hand are not reserved: inside the kernel's ephemeral range
    // the workers' own outgoing connections take some of them before their
    // owners listen (a 40-worker job failed so, "Address already in use").
    const int count = metricsOn ? 2 * workers : workers;
    if (auto range = ephemeralPortRange();
        range && overlapsPortRange(static_cast<int>(*firstPort), count, *range)) {
      std::cerr << "rpcjob: --first-port " << *firstPort << ": ports " << *firstPort << ".."
                << *firstPort + count - 1 << " meet this machine's ephemeral port range "
                << range->first << ".." << range->second
                << " (/proc/sys/net/ipv4/ip_local_port_range), where the workers' own "
                   "connections can take them before the workers listen; choose ports below "
                << range->first << " (or leave --first-port out: free ports are reserved)\n";
      return kExitUsage;
    }
    for (int i = 0; i < 2 * workers; ++i) ports.push_back(static_cast<int>(*firstPort) + i);
  } else {
    reserved.emplace(metricsOn ? 2 * workers : workers);
    ports = reserved->ports();
  }
  planner::PlanOptions options;
  options.target = planner::Target::Local;
  options.endpoints = [&](const planner::WorkerPlacement& w) {
    planner::Endpoint e;
    e.address = "127.0.0.1:" + std::to_string(ports.at(w.rank));
    e.metricsPort = metricsOn ? ports.at(workers + w.rank) : 0;
    return e;
  };
  planner::ClusterView machine =
      planner::localCluster(local.gpus, local.cpuMilli, local.memoryBytes);
  machine.nodes[0].gpuTopology = local.topology;
  const planner::Plan plan = planner::planJob(*job, machine, options);
  if (!plan.planned()) {
    std::cerr << "rpcjob: cannot run " << name << " on this machine: " << toString(plan.outcome)
              << ": " << plan.message << "\n";
    for (const auto& e : plan.errors) std::cerr << "  " << e.toString() << "\n";
    return kExitUsage;
  }

  const std::string runDir =
      makeRunDir(args.flags.count("--run-dir") ? args.flags.at("--run-dir") : "", name);
  LaunchContext context;
  context.workerBinary = resolveWorkerBinary(
      args.flags.count("--worker-binary") ? args.flags.at("--worker-binary") : "");
  context.runDir = runDir;
  context.manifestDir = fs::absolute(args.positional[0]).parent_path().string();
  context.assignmentPath = runDir + "/assignment.yaml";
  writeAssignmentFile(plan.assignment, context.assignmentPath);
  context.secretPath = runDir + "/secret";
  writeJobSecret(context.secretPath);
  for (const auto& w : plan.assignment.workers)
    std::remove((runDir + "/" + w.name + ".metrics").c_str());
  // Each worker's share of the cores, unless this shell says otherwise.
  context.intraOpThreads = intraOpThreads(static_cast<int>(local.cpuMilli / 1000), workers);
  for (const char* name : {kEnvOmpNumThreads, kEnvOmpWaitPolicy}) {
    if (std::getenv(name) != nullptr) context.inherited.push_back(name);
  }
  const Launches launches = buildLaunches(*job, plan, context);
  if (context.intraOpThreads > 0 && std::getenv(kEnvOmpNumThreads) == nullptr) {
    std::cout << "rpcjob: intra-op threads: " << context.intraOpThreads << " per worker ("
              << local.cpuMilli / 1000 << " cores shared by " << workers
              << " workers, OMP_WAIT_POLICY=PASSIVE; OMP_NUM_THREADS in the template or this shell "
                 "overrides)\n";
  }
  for (const auto& note : plan.notes) std::cout << "rpcjob: plan: " << note << "\n";
  for (const auto& note : launches.notes) std::cout << "rpcjob: note: " << note << "\n";

  std::cout << "rpcjob: running " << name << ": " << workers << " workers; run dir " << runDir
            << "\n";
  for (const auto& w : launches.workers) {
    std::string command;
    for (const auto& a : w.argv) {
      const bool quote = a.empty() || a.find_first_of(" \t'\"$") != std::string::npos;
      command += (command.empty() ? "" : " ") + (quote ? "'" + a + "'" : a);
    }
    std::cout << "rpcjob:   rank " << w.rank << "  " << w.name << "  rpc " << w.address
              << "  metrics "
              << (w.metricsPort ? "127.0.0.1:" + std::to_string(w.metricsPort) : std::string("off"))
              << "  $ " << command << "\n";
  }
  std::cout.flush();

  SupervisorOptions supervisorOptions;
  supervisorOptions.jobName = name;
  supervisorOptions.backoffLimit = job->spec.runPolicy.backoffLimit;
  supervisorOptions.activeDeadlineSeconds = job->spec.runPolicy.activeDeadlineSeconds;
  supervisorOptions.gracePeriod = std::chrono::seconds(grace);
  supervisorOptions.liveStatus = isatty(STDOUT_FILENO) == 1;
  const SupervisorResult result = supervise(launches.workers, supervisorOptions);

  std::vector<WorkerSummary> summary;
  for (std::size_t i = 0; i < result.workers.size(); ++i) {
    const WorkerRun& w = result.workers[i];
    summary.push_back({w.name, w.rank, w.status, w.restarts,
                       readChannelTraffic(launches.workers[i].metricsFile)});
  }
  std::cout << "\n" << renderSummary(summary);
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", result.seconds);
  std::cout << "rpcjob: job " << name << " " << toString(result.phase);
  if (result.phase == JobPhase::Failed) std::cout << " (" << result.reason << ")";
  std::cout << " in " << seconds << " s: " << result.message << "\n";
  std::cout.flush();
  if (result.phase == JobPhase::Succeeded) return kExitOk;
  if (result.interruptSignal != 0) return 128 + result.interruptSignal;
  return kExitJobFailed;
}

}  // namespace

int runCli(const std::vector<std::string>& args) {
  if (args.empty()) return usage();
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (command == "--version" || command == "version") {
      std::cout << "rpcjob " << RPCJOB_VERSION_STRING << "\n";
      return kExitOk;
    }
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage;
      return kExitOk;
    }
    if (command == "validate") return cmdValidate(rest);
    if (command == "plan") return cmdPlan(rest);
    if (command == "run") return cmdRun(rest);
  } catch (const std::exception& e) {
    std::cerr << "rpcjob: " << e.what() << "\n";
    return kExitUsage;
  }
  return usage("unknown command " + command);
}

}  // namespace rpcjob::runner
