#include "rpcjob/api/validate.h"

#include <map>
#include <set>

#include "rpcjob/api/devices.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/quantity.h"
#include "rpcjob/api/vocabulary.h"

namespace rpcjob::api {
namespace {

class Collector {
 public:
  Collector(std::vector<FieldError>& errors, const SourceMap& lines)
      : errors_(errors), lines_(lines) {}

  // Puts the line of the nearest recorded field on the path (the field itself,
  // else its parent, ...).
  void add(const std::string& path, const std::string& message) {
    errors_.push_back({path, lineFor(path), message});
  }

 private:
  int lineFor(std::string path) const {
    while (!path.empty()) {
      const auto it = lines_.find(path);
      if (it != lines_.end()) return it->second;
      const auto cut = path.find_last_of(".[");
      if (cut == std::string::npos) break;
      path.resize(cut);
    }
    return 0;
  }

  std::vector<FieldError>& errors_;
  const SourceMap& lines_;
};

std::string at(const std::string& base, std::size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

void checkQuantity(Collector& c, const std::string& path, const std::string& text) {
  if (text.empty()) return;
  const auto q = parseQuantity(text);
  if (!q) {
    c.add(path, "'" + text + "' is not a quantity (e.g. 500m, 2, 1Gi, 512Mi, 1e3)");
  } else if (q->milli < 0) {
    c.add(path, "must not be negative, got " + text);
  }
}

void checkTemplate(Collector& c, const PodTemplate& t, const std::string& path) {
  for (std::size_t i = 0; i < t.containers.size(); ++i) {
    const std::string p = at(path + ".spec.containers", i) + ".resources.requests";
    checkQuantity(c, p + ".cpu", t.containers[i].cpuRequest);
    checkQuantity(c, p + ".memory", t.containers[i].memoryRequest);
  }
}

void checkGroups(Collector& c, const RpcJob& job) {
  const auto& groups = job.spec.workers;
  if (groups.empty()) c.add("spec.workers", "at least one worker group is required");
  std::set<std::string> groupNames;
  std::map<std::string, std::string> workerOwner;  // worker name -> group path
  long total = 0;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const WorkerGroup& g = groups[i];
    const std::string path = at("spec.workers", i);
    if (!isDns1035Label(g.name)) {
      c.add(path + ".name", "'" + g.name +
                                "' is not a DNS label starting with a letter (a-z, 0-9, '-', "
                                "at most 63)");
    } else if (!groupNames.insert(g.name).second) {
      c.add(path + ".name", "duplicate group name '" + g.name + "'");
    }
    if (g.replicas < 1)
      c.add(path + ".replicas", "must be >= 1, got " + std::to_string(g.replicas));
    if (g.gpusPerWorker < 0) {
      c.add(path + ".gpusPerWorker", "must be >= 0, got " + std::to_string(g.gpusPerWorker));
    }
    checkTemplate(c, g.podTemplate, path + ".template");
    if (g.replicas < 1 || g.name.empty()) continue;
    total += g.replicas;
    if (total > kMaxWorkers) continue;  // reported below; do not derive thousands of names
    for (int k = 0; k < g.replicas; ++k) {
      const std::string name = workerName(g, k);
      if (name.size() > kMaxDnsLabel) {
        c.add(path + ".name", "worker name '" + name + "' is longer than 63 characters");
        break;
      }
      const auto [it, fresh] = workerOwner.emplace(name, path);
      if (!fresh) {
        c.add(path + ".name",
              "worker name '" + name + "' is also a worker of " + it->second + " (rename a group)");
        break;
      }
    }
    // Pod names: "<job>-<group>-<last index>" with one worker per pod.
    if (job.spec.placement.workersPerPod == WorkersPerPod::One && !job.metadata.name.empty()) {
      const std::string pod = workerPodName(job.metadata.name, g.name, g.replicas - 1);
      if (pod.size() > kMaxDnsLabel) {
        c.add(path + ".name", "pod name '" + pod + "' would be longer than 63 characters " +
                                  "(shorten the job or group name)");
      }
    }
  }
  if (total > kMaxWorkers) {
    c.add("spec.workers", "the job has " + std::to_string(total) + " workers; at most " +
                              std::to_string(kMaxWorkers) + " are allowed");
  }
  if (job.spec.placement.workersPerPod == WorkersPerPod::Auto && total > 0 &&
      !job.metadata.name.empty()) {
    // At worst one pod per worker.
    const std::string pod = sharedPodName(job.metadata.name, static_cast<int>(total) - 1);
    if (pod.size() > kMaxDnsLabel) {
      c.add("metadata.name", "pod name '" + pod + "' would be longer than 63 characters");
    }
  }
}

void checkNames(Collector& c, const std::vector<std::string>& names, const std::string& path,
                bool (*known)(const std::string&), const char* what) {
  std::set<std::string> seen;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!known(names[i]))
      c.add(at(path, i), "unknown " + std::string(what) + " '" + names[i] + "'");
    if (!seen.insert(names[i]).second) c.add(at(path, i), "'" + names[i] + "' is listed twice");
  }
}

void checkDeviceMaps(Collector& c, const RpcJobSpec& spec) {
  std::map<std::string, int> gpusOf;  // worker name -> gpusPerWorker
  for (const auto& g : spec.workers) {
    if (g.replicas < 1 || g.replicas > kMaxWorkers) continue;
    for (int k = 0; k < g.replicas; ++k) gpusOf[workerName(g, k)] = g.gpusPerWorker;
  }
  std::map<std::pair<std::string, std::string>, std::size_t> given;  // (from, to) -> index
  std::vector<bool> wellFormed(spec.deviceMaps.maps.size(), true);
  for (std::size_t i = 0; i < spec.deviceMaps.maps.size(); ++i) {
    const ExplicitDeviceMap& m = spec.deviceMaps.maps[i];
    const std::string path = at("spec.deviceMaps.maps", i);
    bool namesOk = true;
    for (const auto& [field, name] : {std::pair{"from", m.from}, std::pair{"to", m.to}}) {
      const auto it = gpusOf.find(name);
      if (it == gpusOf.end()) {
        c.add(path + "." + field, "no worker named '" + name + "'");
        namesOk = false;
      } else if (it->second == 0) {
        c.add(path + "." + field, "worker '" + name + "' has no GPUs (gpusPerWorker is 0)");
        namesOk = false;
      }
    }
    if (namesOk && m.from == m.to) {
      c.add(path + ".to", "a worker has no device map to itself");
      namesOk = false;
    }
    if (namesOk && !given.emplace(std::pair{m.from, m.to}, i).second) {
      c.add(path, "a second map from '" + m.from + "' to '" + m.to + "'");
    }
    if (m.devices.empty()) c.add(path + ".devices", "at least one device pair is required");
    std::set<std::string> targets;
    for (const auto& [from, to] : m.devices) {
      const std::string p = path + ".devices." + from;
      const auto local = parseCudaDevice(from);
      const auto remote = parseCudaDevice(to);
      if (!local || !remote) {
        c.add(p, "devices are cuda:k (k counts the worker's own GPUs), got '" + from + "' -> '" +
                     to + "'");
        wellFormed[i] = false;
        continue;
      }
      if (namesOk && *local >= gpusOf[m.from]) {
        c.add(p, "'" + m.from + "' has " + std::to_string(gpusOf[m.from]) + " GPU(s); no " + from);
      }
      if (namesOk && *remote >= gpusOf[m.to]) {
        c.add(p, "'" + m.to + "' has " + std::to_string(gpusOf[m.to]) + " GPU(s); no " + to);
      }
      if (!targets.insert(to).second) {
        c.add(p, "two devices map to " + to + " (device maps are one-to-one)");
      }
    }
  }
  // A map given in both directions must be one the inverse of the other.
  for (const auto& [pair, i] : given) {
    const auto reverse = given.find({pair.second, pair.first});
    if (reverse == given.end() || reverse->second < i) continue;
    if (!wellFormed[i] || !wellFormed[reverse->second]) continue;  // reported already
    std::map<std::string, std::string> inverse;
    for (const auto& [from, to] : spec.deviceMaps.maps[i].devices) inverse[to] = from;
    if (inverse != spec.deviceMaps.maps[reverse->second].devices) {
      c.add(at("spec.deviceMaps.maps", reverse->second) + ".devices",
            "the map from '" + pair.second + "' to '" + pair.first +
                "' must be the inverse of the map the other way (responses use the inverse)");
    }
  }
}

void checkGpuSharing(Collector& c, const RpcJobSpec& spec) {
  const int n = spec.placement.workersPerGpu;
  const std::string path = "spec.placement.workersPerGpu";
  if (n < 1 || n > kMaxWorkersPerGpu) {
    c.add(path, "must be 1.." + std::to_string(kMaxWorkersPerGpu) + ", got " + std::to_string(n));
    return;
  }
  if (n == 1) return;
  if (spec.placement.workersPerPod != WorkersPerPod::Auto) {
    c.add(path, "workers share a GPU only inside one pod: set spec.placement.workersPerPod: Auto");
  }
  for (std::size_t i = 0; i < spec.workers.size(); ++i) {
    if (spec.workers[i].gpusPerWorker > 1) {
      c.add(at("spec.workers", i) + ".gpusPerWorker",
            "must be 0 or 1 when workers share GPUs (spec.placement.workersPerGpu " +
                std::to_string(n) + "), got " + std::to_string(spec.workers[i].gpusPerWorker));
    }
  }
}

void checkPolicies(Collector& c, const RpcJobSpec& spec) {
  const RunPolicy& p = spec.runPolicy;
  if (p.backoffLimit < 0) {
    c.add("spec.runPolicy.backoffLimit", "must be >= 0, got " + std::to_string(p.backoffLimit));
  }
  if (p.activeDeadlineSeconds && *p.activeDeadlineSeconds < 1) {
    c.add("spec.runPolicy.activeDeadlineSeconds",
          "must be >= 1, got " + std::to_string(*p.activeDeadlineSeconds));
  }
  if (p.ttlSecondsAfterFinished && *p.ttlSecondsAfterFinished < 0) {
    c.add("spec.runPolicy.ttlSecondsAfterFinished",
          "must be >= 0, got " + std::to_string(*p.ttlSecondsAfterFinished));
  }
  if (spec.metrics.port < 0 || spec.metrics.port > 65535) {
    c.add("spec.metrics.port",
          "must be 0 (off) or a port 1..65535, got " + std::to_string(spec.metrics.port));
  }
}

}  // namespace

std::vector<FieldError> validateRpcJob(const RpcJob& job, const SourceMap& lines) {
  std::vector<FieldError> errors;
  Collector c(errors, lines);
  if (!isDns1035Label(job.metadata.name)) {
    c.add("metadata.name", "'" + job.metadata.name +
                               "' is not a DNS label starting with a letter (a-z, 0-9, '-', at "
                               "most 63): it names the job's Service and pods");
  }
  checkGroups(c, job);
  checkNames(c, job.spec.transports, "spec.transports", isKnownTransport, "transport");
  checkNames(c, job.spec.channels, "spec.channels", isKnownChannel, "channel");
  checkDeviceMaps(c, job.spec);
  checkGpuSharing(c, job.spec);
  checkPolicies(c, job.spec);
  return errors;
}

}  // namespace rpcjob::api
