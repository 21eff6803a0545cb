#pragma once
// Leader election on a coordination.k8s.io/v1 Lease, after client-go's
// leaderelection package:
//
//  - acquire: the Lease is free when it does not exist, has no holder, or its
//    record (holder, renewTime) has not changed for leaseDuration as measured on
//    this process's own clock since it first saw that record (no trust in other
//    machines' clocks). Writes use the Lease's resourceVersion, so of two
//    candidates only one wins (the other gets 409).
//  - renew: every retryPeriod the leader writes renewTime. If it cannot renew
//    for renewDeadline (counted from the start of its last successful renew
//    request) it gives leadership up (onStoppedLeading), before the others may
//    take the lease: the last moment it can still act is renewDeadline +
//    retryPeriod + one call's timeout after that start, which must be shorter
//    than leaseDuration (rpcjob-operator gives the Lease its own client with a
//    2 s timeout: 10 + 2 + 2 < 15 s, and exits at once when it loses the lease,
//    so no reconcile in flight acts after).
//  - on cancel, with releaseOnCancel, the leader clears holderIdentity so a
//    successor need not wait out the lease.
//
// Thread-safety: run() on one thread; isLeader()/leader() from any.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "rpcjob/operator/cancellation.h"
#include "rpcjob/operator/client.h"

namespace rpcjob::kube {

struct LeaderElectionOptions {
  std::string leaseNamespace = "default";
  std::string leaseName = "rpcjob-operator";
  std::string identity;  // unique per replica: the pod name plus a random suffix
  std::chrono::milliseconds leaseDuration{std::chrono::seconds(15)};
  std::chrono::milliseconds renewDeadline{std::chrono::seconds(10)};
  std::chrono::milliseconds retryPeriod{std::chrono::seconds(2)};
  bool releaseOnCancel = true;
};

struct LeaderCallbacks {
  std::function<void()> onStartedLeading;  // called on run()'s thread; must return quickly
  std::function<void()> onStoppedLeading;  // lost or released
  std::function<void(const std::string& identity)> onNewLeader;  // holder changed
};

class LeaderElector {
 public:
  LeaderElector(std::shared_ptr<Client> client, LeaderElectionOptions options,
                LeaderCallbacks callbacks);

  // Tries to acquire until it succeeds or `stop` fires, then renews until
  // renewing fails for renewDeadline or `stop` fires. Returns after
  // onStoppedLeading (if it led at all). Returns true if it led and lost the
  // lease (not stopped).
  bool run(Cancellation& stop);

  bool isLeader() const { return leader_.load(); }
  std::string leader() const;  // the holder last observed

  // One attempt (public for tests): true when this process holds the lease after it.
  bool tryAcquireOrRenew();

 private:
  void release();

  std::shared_ptr<Client> client_;
  LeaderElectionOptions options_;
  LeaderCallbacks callbacks_;
  std::atomic<bool> leader_{false};

  mutable std::mutex mu_;
  std::string observedHolder_;
  std::string observedRenewTime_;
  std::chrono::steady_clock::time_point observedAt_{};
};

// "2006-01-02T15:04:05.000000Z" (metav1.MicroTime) for a system time.
std::string formatMicroTime(std::chrono::system_clock::time_point t);

}  // namespace rpcjob::kube
