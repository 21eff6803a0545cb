#pragma once

// Every metric rpcjob exports, in one place. metrics/README.md documents each
// one (type, labels, meaning); tests/metrics checks that the two agree.
//
// Conventions (https://prometheus.io/docs/practices/naming/): one prefix
// `rpcjob_`, base units (seconds, bytes), counters end in `_total`.

namespace rpcjob {
namespace metrics {
namespace names {

// Channels (one series per channel, direction, peer, local_device, remote_device).
inline constexpr char kChannelTransfers[] = "rpcjob_channel_transfers_total";
inline constexpr char kChannelBytes[] = "rpcjob_channel_bytes_total";
inline constexpr char kChannelErrors[] = "rpcjob_channel_errors_total";
inline constexpr char kChannelTransferDuration[] = "rpcjob_channel_transfer_duration_seconds";

// Transports (one series per transport, peer [, direction]).
inline constexpr char kTransportConnections[] = "rpcjob_transport_connections_total";
inline constexpr char kTransportBytes[] = "rpcjob_transport_bytes_total";
inline constexpr char kTransportErrors[] = "rpcjob_transport_errors_total";

// RPC level.
inline constexpr char kRpcCalls[] = "rpcjob_rpc_calls_total";
inline constexpr char kRpcDuration[] = "rpcjob_rpc_duration_seconds";
inline constexpr char kRpcInFlight[] = "rpcjob_rpc_in_flight";
inline constexpr char kPipeHandshakes[] = "rpcjob_pipe_handshakes_total";
inline constexpr char kPipeHandshakeDuration[] = "rpcjob_pipe_handshake_duration_seconds";
inline constexpr char kHandshakeFailures[] = "rpcjob_rpc_handshake_failures_total";
inline constexpr char kChannelSelected[] = "rpcjob_channel_selected";
inline constexpr char kWorkerInfo[] = "rpcjob_worker_info";

}  // namespace names

// Label names.
namespace labels {
inline constexpr char kChannel[] = "channel";
inline constexpr char kTransport[] = "transport";
inline constexpr char kDirection[] = "direction";
inline constexpr char kPeer[] = "peer";
inline constexpr char kLocalDevice[] = "local_device";
inline constexpr char kRemoteDevice[] = "remote_device";
inline constexpr char kFunction[] = "function";
inline constexpr char kStatus[] = "status";
inline constexpr char kSide[] = "side";
inline constexpr char kWorker[] = "worker";
inline constexpr char kRank[] = "rank";
// Not `job`: Prometheus owns `job` (the scrape job) and would rename ours to
// `exported_job` on ingestion.
inline constexpr char kJob[] = "rpcjob_job";
inline constexpr char kNode[] = "node";
}  // namespace labels

}  // namespace metrics
}  // namespace rpcjob
