#include "rpcjob/operator/leader_election.h"

#include <ctime>
#include <random>

#include "json_util.h"
#include "rpcjob/operator/log.h"

namespace rpcjob::kube {

std::string formatMicroTime(std::chrono::system_clock::time_point t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof out, "%s.%06ldZ", buf, static_cast<long>(us % 1000000));
  return out;
}

LeaderElector::LeaderElector(std::shared_ptr<Client> client, LeaderElectionOptions options,
                             LeaderCallbacks callbacks)
    : client_(std::move(client)), options_(std::move(options)), callbacks_(std::move(callbacks)) {
  if (options_.identity.empty()) throw std::invalid_argument("leader election needs an identity");
}

std::string LeaderElector::leader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return observedHolder_;
}

bool LeaderElector::tryAcquireOrRenew() {
  using web::json::value;
  const auto& leases = resources::kLeases;
  const auto now = std::chrono::steady_clock::now();
  const std::string nowText = formatMicroTime(std::chrono::system_clock::now());
  const int64_t durationSec = std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::seconds>(options_.leaseDuration).count());

  std::optional<Object> current;
  try {
    // +rpcjob:rbac:groups=coordination.k8s.io,resources=leases,verbs=get
    current = client_->tryGet(leases, options_.leaseNamespace, options_.leaseName);
  } catch (const ApiError& e) {
    KLOG_WARN("leader", "reading lease " << options_.leaseName << ": " << e.what());
    return false;
  }

  value lease = value::object();
  std::string holder, acquireTime;
  int64_t transitions = 0;
  if (current) {
    auto parsed = detail::parseJson(current->json);
    if (!parsed || !parsed->is_object()) return false;
    lease = *parsed;
    value spec = lease.has_object_field("spec") ? lease.at("spec") : value::object();
    holder = detail::getString(spec, "holderIdentity");
    acquireTime = detail::getString(spec, "acquireTime");
    transitions = detail::getInt(spec, "leaseTransitions");
    std::string renewTime = detail::getString(spec, "renewTime");
    bool changedHolder = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (holder != observedHolder_ || renewTime != observedRenewTime_) {
        changedHolder = holder != observedHolder_;
        observedHolder_ = holder;
        observedRenewTime_ = renewTime;
        observedAt_ = now;
      }
    }
    if (changedHolder && !holder.empty() && callbacks_.onNewLeader) callbacks_.onNewLeader(holder);
    if (!holder.empty() && holder != options_.identity) {
      std::lock_guard<std::mutex> lock(mu_);
      if (now < observedAt_ + options_.leaseDuration) return false;  // held by someone else
    }
  }

  const bool wasOurs = current && holder == options_.identity;
  value spec = value::object();
  spec["holderIdentity"] = value::string(options_.identity);
  spec["leaseDurationSeconds"] = value::number(durationSec);
  spec["acquireTime"] = value::string(wasOurs && !acquireTime.empty() ? acquireTime : nowText);
  spec["renewTime"] = value::string(nowText);
  spec["leaseTransitions"] = value::number(wasOurs || !current ? transitions : transitions + 1);
  lease["spec"] = spec;
  try {
    if (current) {
      // +rpcjob:rbac:groups=coordination.k8s.io,resources=leases,verbs=update
      client_->replace(leases, options_.leaseNamespace, options_.leaseName, lease.serialize());
    } else {
      lease["apiVersion"] = value::string("coordination.k8s.io/v1");
      lease["kind"] = value::string("Lease");
      lease["metadata"]["name"] = value::string(options_.leaseName);
      lease["metadata"]["namespace"] = value::string(options_.leaseNamespace);
      // +rpcjob:rbac:groups=coordination.k8s.io,resources=leases,verbs=create
      client_->create(leases, options_.leaseNamespace, lease.serialize());
    }
  } catch (const ApiError& e) {
    if (!e.conflict())
      KLOG_WARN("leader", "writing lease " << options_.leaseName << ": " << e.what());
    return false;
  }
  bool newHolder = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    newHolder = observedHolder_ != options_.identity;
    observedHolder_ = options_.identity;
    observedRenewTime_ = nowText;
    observedAt_ = now;
  }
  if (newHolder && callbacks_.onNewLeader) callbacks_.onNewLeader(options_.identity);
  return true;
}

void LeaderElector::release() {
  try {
    // +rpcjob:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update
    auto current = client_->tryGet(resources::kLeases, options_.leaseNamespace, options_.leaseName);
    if (!current) return;
    auto lease = detail::parseJson(current->json);
    if (!lease || detail::getString(lease->at("spec"), "holderIdentity") != options_.identity)
      return;
    (*lease)["spec"]["holderIdentity"] = web::json::value::string("");
    (*lease)["spec"]["leaseDurationSeconds"] = web::json::value::number(1);
    client_->replace(resources::kLeases, options_.leaseNamespace, options_.leaseName,
                     lease->serialize());
    KLOG_INFO("leader", options_.identity << " released lease " << options_.leaseName);
  } catch (const std::exception& e) {
    KLOG_WARN("leader", "releasing lease: " << e.what());
  }
}

bool LeaderElector::run(Cancellation& stop) {
  std::mt19937_64 rng(std::random_device{}());
  auto jittered = [&](std::chrono::milliseconds d) {
    // client-go waits retryPeriod * (1 + U[0, 1.2)) between acquire attempts.
    return d + std::chrono::milliseconds(
                   static_cast<int64_t>(d.count() * 1.2 * (rng() % 1000) / 1000.0));
  };
  while (!stop.cancelled()) {
    if (tryAcquireOrRenew()) break;
    stop.sleepFor(jittered(options_.retryPeriod));
  }
  if (stop.cancelled()) return false;
  leader_ = true;
  KLOG_INFO("leader", options_.identity << " acquired lease " << options_.leaseNamespace << "/"
                                        << options_.leaseName);
  if (callbacks_.onStartedLeading) callbacks_.onStartedLeading();
  auto lastRenew = std::chrono::steady_clock::now();
  bool lost = false;
  while (!stop.sleepFor(options_.retryPeriod)) {
    // The others count leaseDuration from when they see the renewal, which is
    // never before this request started: measure from there, not from its answer.
    const auto attempt = std::chrono::steady_clock::now();
    if (tryAcquireOrRenew()) {
      lastRenew = attempt;
      continue;
    }
    if (std::chrono::steady_clock::now() - lastRenew >= options_.renewDeadline) {
      lost = true;
      break;
    }
  }
  leader_ = false;
  if (lost) {
    KLOG_ERROR("leader", options_.identity << " lost lease " << options_.leaseName);
  } else if (options_.releaseOnCancel) {
    release();
  }
  if (callbacks_.onStoppedLeading) callbacks_.onStoppedLeading();
  return lost;
}

}  // namespace rpcjob::kube
