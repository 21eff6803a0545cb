#pragma once
// The environment a worker is started with, by the operator (pod env) and the
// local runner (process env) alike. Names live here, once.

#include <string>

#include "rpcjob/assignment/assignment.h"

namespace rpcjob {

inline constexpr const char* kEnvWorkerName = "RPCJOB_WORKER_NAME";
inline constexpr const char* kEnvRank = "RPCJOB_RANK";
inline constexpr const char* kEnvWorldSize = "RPCJOB_WORLD_SIZE";
inline constexpr const char* kEnvJobName = "RPCJOB_JOB_NAME";
inline constexpr const char* kEnvNamespace = "RPCJOB_NAMESPACE";
// Path of the mounted or written assignment file.
inline constexpr const char* kEnvAssignmentPath = "RPCJOB_ASSIGNMENT";
// Alternative to the file for ad-hoc runs: "name@host:port,name@host:port,..." in
// rank order (the first is rank 0).
inline constexpr const char* kEnvPeers = "RPCJOB_PEERS";
// Where a worker writes its final metrics (Prometheus text format) when it exits, so
// that the local runner can print bytes per channel after the processes are gone.
// Unset: nothing is written.
inline constexpr const char* kEnvMetricsFile = "RPCJOB_METRICS_FILE";
// Port of the worker's /metrics endpoint (overrides the table's metricsPort; 0: none).
inline constexpr const char* kEnvMetricsPort = "RPCJOB_METRICS_PORT";
// "0" drops the `peer` label from the worker's metrics (exported empty), so that
// series do not grow with the number of workers; "1" or unset keeps it. The RpcJob
// spec's metrics.perPeerLabels maps to it.
inline constexpr const char* kEnvMetricsPeerLabels = "RPCJOB_METRICS_PEER_LABELS";
// A file holding the job's secret (the runner writes one per run, mode 0600; the
// operator mounts the job's Secret): the workers' pipes authenticate with it.
// Unset: they do not (the worker warns). Set but unreadable: the worker refuses
// to start.
inline constexpr const char* kEnvSecretFile = "RPCJOB_SECRET_FILE";
// How long a pipe may take to authenticate before it is closed (milliseconds).
inline constexpr const char* kEnvHandshakeTimeoutMs = "RPCJOB_HANDSHAKE_TIMEOUT_MS";

// Builds an assignment from an RPCJOB_PEERS list. Throws AssignmentError.
Assignment assignmentFromPeerList(const std::string& list);

// Who this process is and who its peers are, from the environment: the file at
// RPCJOB_ASSIGNMENT, else RPCJOB_PEERS; the worker by RPCJOB_WORKER_NAME, else by
// RPCJOB_RANK. RPCJOB_RANK and RPCJOB_WORLD_SIZE, when set, must agree with the
// table. Throws AssignmentError with what is missing or inconsistent.
struct Identity {
  Assignment assignment;
  std::string name;
  int rank = -1;
};
Identity identityFromEnvironment();

}  // namespace rpcjob
