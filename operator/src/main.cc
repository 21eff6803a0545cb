// rpcjob-operator: reconciles RpcJobs (op::JobReconciler: plan, assign, launch
// the pods, keep the status, apply the run policy).
//
//   rpcjob-operator [--kubeconfig FILE] [--namespace NS] [--leader-elect]
//                   [--leader-election-namespace NS | --lease-namespace NS]
//                   [--lease-name NAME] [--id IDENTITY] [--workers N]
//                   [--metrics-address IP] [--metrics-port N] [-v] [--version]
//
// --metrics-port (default 8080; 0 picks a free port, -1 turns it off) serves
// /metrics, /healthz and /readyz. The leader-election identity is --id, else
// $POD_NAME (the chart sets it), else the host name plus a random suffix. The
// Lease's namespace: the flag, else $POD_NAMESPACE, else the config's namespace.
// Writes no file.

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "rpcjob/metrics/http_server.h"
#include "rpcjob/operator/client.h"
#include "rpcjob/operator/config.h"
#include "rpcjob/operator/controller.h"
#include "rpcjob/operator/events.h"
#include "rpcjob/operator/job_reconciler.h"
#include "rpcjob/operator/leader_election.h"
#include "rpcjob/operator/log.h"
#include "rpcjob/operator/operator_metrics.h"
#include "rpcjob/version.h"

namespace {

using namespace rpcjob;

struct Flags {
  std::string kubeconfig;
  std::string ns;
  bool leaderElect = false;
  std::string leaseNamespace;
  std::string leaseName = "rpcjob-operator";
  std::string id;
  int workers = 2;
  std::string metricsAddress = "0.0.0.0";
  int metricsPort = 8080;  // 0: any free port (logged); -1: no HTTP server
  int nodeLostGraceSeconds = 60;
  int resyncSeconds = 300;
  double qps = 20;
  int burst = 40;
  op::NetworkPolicyOptions networkPolicy;  // job_security.h
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: rpcjob-operator [--kubeconfig FILE] [--namespace NS] [--leader-elect]\n"
               "                       [--leader-election-namespace NS] [--lease-name NAME]\n"
               "                       [--id ID]\n"
               "                       [--workers N] [--metrics-address IP] [--metrics-port N]\n"
               "                       [--qps Q] [--burst N] [--node-lost-grace S]\n"
               "                       [--resync-period S] [--network-policy=true|false]\n"
               "                       [--network-policy-metrics-from JSON] [-v] [--version]\n"
               "Without --kubeconfig: $KUBECONFIG, then the in-cluster service account,\n"
               "then ~/.kube/config. Without --namespace: all namespaces.\n");
}

kube::Cancellation gStop;
void onSignal(int) {
  // Only async-signal-safe work here: a thread below does the cancel.
  static const char msg[] = "signal: stopping\n";
  (void)!write(2, msg, sizeof msg - 1);
}

}  // namespace

int main(int argc, char** argv) {
  // Signals: blocked before any thread exists (cpprestsdk starts a pool), so
  // every thread inherits the mask; one thread below waits for them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      std::string prefix = std::string(name) + "=";
      if (a.rfind(prefix, 0) == 0) return a.substr(prefix.size());
      if (i + 1 >= argc) {
        std::fprintf(stderr, "rpcjob-operator: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    auto is = [&](const char* name) {
      return a == name || a.rfind(std::string(name) + "=", 0) == 0;
    };
    if (a == "--version") {
      std::printf("rpcjob-operator %s\n", RPCJOB_VERSION_STRING);
      return 0;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-v") {
      kube::setLogLevel(kube::LogLevel::kDebug);
    } else if (a == "--leader-elect") {
      flags.leaderElect = true;
    } else if (is("--kubeconfig")) {
      flags.kubeconfig = value("--kubeconfig");
    } else if (is("--namespace")) {
      flags.ns = value("--namespace");
    } else if (is("--leader-election-namespace")) {
      flags.leaseNamespace = value("--leader-election-namespace");
    } else if (is("--lease-namespace")) {  // the older spelling
      flags.leaseNamespace = value("--lease-namespace");
    } else if (is("--lease-name")) {
      flags.leaseName = value("--lease-name");
    } else if (is("--id")) {
      flags.id = value("--id");
    } else if (is("--metrics-address")) {
      flags.metricsAddress = value("--metrics-address");
    } else if (is("--metrics-port")) {
      flags.metricsPort = std::atoi(value("--metrics-port").c_str());
    } else if (is("--network-policy")) {
      const std::string v = a == "--network-policy" ? "true" : value("--network-policy");
      if (v != "true" && v != "false") {
        std::fprintf(stderr, "rpcjob-operator: --network-policy takes true or false\n");
        return 2;
      }
      flags.networkPolicy.enabled = v == "true";
    } else if (is("--network-policy-metrics-from")) {
      flags.networkPolicy.metricsFrom = value("--network-policy-metrics-from");
      try {
        op::networkPolicyJson({"j", "n", "u"}, {1}, flags.networkPolicy);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rpcjob-operator: --network-policy-metrics-from: %s\n", e.what());
        return 2;
      }
    } else if (is("--qps")) {
      flags.qps = std::atof(value("--qps").c_str());
    } else if (is("--burst")) {
      flags.burst = std::atoi(value("--burst").c_str());
    } else if (is("--node-lost-grace")) {
      flags.nodeLostGraceSeconds = std::atoi(value("--node-lost-grace").c_str());
    } else if (is("--resync-period")) {
      flags.resyncSeconds = std::atoi(value("--resync-period").c_str());
    } else if (is("--workers")) {
      flags.workers = std::atoi(value("--workers").c_str());
    } else {
      std::fprintf(stderr, "rpcjob-operator: unknown argument %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }

  kube::ClusterConfig config;
  try {
    config = kube::loadDefaultConfig(flags.kubeconfig);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rpcjob-operator: %s\n", e.what());
    return 2;
  }
  KLOG_INFO("main", "rpcjob-operator " << RPCJOB_VERSION_STRING << " using " << config.server
                                       << " from " << config.source);
  kube::ClientOptions clientOptions;
  clientOptions.qps = flags.qps;
  clientOptions.burst = flags.burst;
  auto client = kube::Client::fromConfig(config, clientOptions);

  std::thread signals([set] {
    int sig = 0;
    sigwait(&set, &sig);
    onSignal(sig);
    gStop.cancel();
  });
  signals.detach();

  op::JobReconciler reconciler(client,
                               std::make_shared<kube::EventRecorder>(client, "rpcjob-operator"));
  reconciler.setNetworkPolicy(flags.networkPolicy);
  reconciler.setNodeLostGrace(std::chrono::seconds(flags.nodeLostGraceSeconds));
  op::OperatorMetrics metrics;
  op::ControllerOptions co;
  co.resyncPeriod = std::chrono::seconds(flags.resyncSeconds);
  co.ns = flags.ns;
  co.workers = flags.workers;
  co.onReconciled = [&metrics](const std::string&, std::chrono::duration<double> took, bool ok) {
    metrics.observeReconcile(took, ok);
  };
  op::Controller controller(client, reconciler, co);
  metrics.watchController(&controller);
  std::atomic<bool> leading{false};

  // /metrics, /healthz, /readyz. Ready: the caches have synced, or this replica
  // is a standby waiting for the Lease (so rollouts of several replicas proceed).
  std::unique_ptr<metrics::HttpServer> http;
  if (flags.metricsPort >= 0) {
    metrics::HttpServerOptions ho;
    ho.bindAddress = flags.metricsAddress;
    ho.port = static_cast<uint16_t>(flags.metricsPort);
    http = std::make_unique<metrics::HttpServer>(
        ho, [&metrics] { return metrics.collect(); },
        [&](std::string& message) {
          // Live while the informers keep in touch with the server; a controller
          // whose caches go stale is restarted by the kubelet.
          if (controller.healthy()) return true;
          message = "an informer has not listed or watched for too long";
          return false;
        },
        [&](std::string& message) {
          if (flags.leaderElect && !leading) {
            message = "standby: not the leader";
            return true;
          }
          if (controller.synced()) return true;
          message = "informer caches not synced";
          return false;
        });
    try {
      http->start();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rpcjob-operator: cannot serve metrics on %s:%d: %s\n",
                   flags.metricsAddress.c_str(), flags.metricsPort, e.what());
      return 2;
    }
    KLOG_INFO("main", "serving /metrics, /healthz, /readyz on " << flags.metricsAddress << ":"
                                                                << http->port());
  }

  int rc = 0;
  if (!flags.leaderElect) {
    rc = controller.run(gStop) ? 0 : 1;
  } else {
    kube::LeaderElectionOptions lo;
    const char* podNamespace = std::getenv("POD_NAMESPACE");
    lo.leaseNamespace = !flags.leaseNamespace.empty()   ? flags.leaseNamespace
                        : podNamespace && *podNamespace ? podNamespace
                                                        : config.namespace_;
    lo.leaseName = flags.leaseName;
    lo.identity = flags.id;
    const char* podName = std::getenv("POD_NAME");
    if (lo.identity.empty() && podName && *podName) lo.identity = podName;
    if (lo.identity.empty()) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      lo.identity = std::string(host) + "_" + std::to_string(std::random_device{}() % 100000);
    }
    // Lead, then run the controller until stopped or the lease is lost. A lost
    // lease ends the process (exit 1): the Deployment restarts it as a candidate.
    kube::Cancellation controllerStop;
    std::thread controllerThread;
    std::atomic<bool> syncFailed{false};
    kube::LeaderCallbacks cb;
    cb.onStartedLeading = [&] {
      leading = true;
      metrics.setLeader(true);
      controllerThread = std::thread([&] {
        if (!controller.run(controllerStop) && !controllerStop.cancelled()) {
          syncFailed = true;  // give the lease up and exit non-zero
          gStop.cancel();
        }
      });
    };
    cb.onStoppedLeading = [&] {
      if (!gStop.cancelled()) {
        // Lost, not released: another replica may lead in a moment; a reconcile
        // in flight must not act after that. Exit now (the Deployment restarts us).
        KLOG_ERROR("main", "lost the lease: exiting");
        std::_Exit(1);
      }
      leading = false;
      metrics.setLeader(false);
      controllerStop.cancel();
    };
    cb.onNewLeader = [](const std::string& id) { KLOG_INFO("leader", "leader is " << id); };
    // Its own client: a renew call never waits longer than 2 s (see
    // leader_election.h: renewDeadline + retryPeriod + call timeout < leaseDuration).
    kube::ClientOptions leaseClientOptions;
    leaseClientOptions.timeout = std::chrono::seconds(2);
    kube::LeaderElector elector(kube::Client::fromConfig(config, leaseClientOptions), lo, cb);
    bool lost = elector.run(gStop);
    if (controllerThread.joinable()) controllerThread.join();
    rc = lost || syncFailed ? 1 : 0;
  }
  if (http) http->stop();
  KLOG_INFO("main", "stopped");
  return rc;
}
