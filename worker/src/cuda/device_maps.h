#pragma once
// Device maps per peer (CUDA build), validated like PyTorch's: every peer named
// is a known worker other than us, devices are "cpu" or "cuda:N", every local
// device exists here, the map is one-to-one, and (once the peer's handshake
// arrived with its device count) every remote device exists there. Requests use
// our map to the callee; responses use the inverse of the caller's map to us,
// which the caller sends in its handshake.
//
// Thread safety: all methods may be called from any thread.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "header_codec.h"
#include "rpcjob/assignment/assignment.h"

namespace rpcjob::runtime {

// Where a message's tensors go on the receiving worker: local device -> the
// peer's device, each -1 for "cpu" or N for "cuda:N".
struct DeviceTargets {
  std::string peer;
  std::string direction;  // "request" or "response", for messages
  std::map<int, int> map;
  std::string error;  // non-empty: the map is invalid; CUDA sends fail with it
};

namespace cuda {

// CUDA devices this process sees (cuda_future.cc).
int deviceCount();

// "cpu" -> -1, "cuda:N" -> N; throws std::invalid_argument otherwise.
int parseDevice(const std::string& device);
std::string deviceName(int device);  // -1 -> "cpu", N -> "cuda:N"

class DeviceMapTable {
 public:
  // Validates our maps (throws RpcError kInvalidArgument naming peer and device).
  void init(const std::string& self, const std::vector<std::string>& workers,
            const std::map<std::string, DeviceMap>& maps, int localCudaDevices);

  // Our handshake entry: device count and our map to every peer.
  void appendHandshake(wire::ChannelDescriptors& out) const;

  // The callee's HelloReply: checks our map to it against its device count.
  // Returns the error ("" when fine); a bad map also fails every CUDA send to it.
  std::string onCalleeDescriptors(const std::string& peer, const wire::ChannelDescriptors& remote);
  // The same check from the peer's device count alone (the leader barrier's
  // start-up learns every worker's count before any pipe to it opens).
  std::string onPeerDeviceCount(const std::string& peer, int remoteCount);
  // A caller's Hello: its map to us, inverted, is what responses to it use.
  void onCallerDescriptors(const std::string& caller, const wire::ChannelDescriptors& remote);

  std::shared_ptr<const DeviceTargets> forRequest(const std::string& peer) const;
  std::shared_ptr<const DeviceTargets> forResponse(const std::string& caller) const;
  // The same by the worker's rank (its index in init's `workers`), for every
  // message: no lock, no reference count. The pointer stays valid for the
  // table's lifetime. Null for a rank init did not name.
  const DeviceTargets* requestTargets(int rank) const { return at(requestsByRank_, rank); }
  const DeviceTargets* responseTargets(int rank) const { return at(responsesByRank_, rank); }

  static constexpr const char* kHandshakeEntry = "rpcjob:cuda";

 private:
  using Table = std::map<std::string, std::shared_ptr<const DeviceTargets>>;
  using Slots = std::unique_ptr<std::atomic<const DeviceTargets*>[]>;
  const DeviceTargets* at(const Slots& slots, int rank) const {
    if (rank < 0 || rank >= workerCount_) return nullptr;
    return slots[rank].load(std::memory_order_acquire);
  }
  // Under mu_: `targets` becomes peer's entry in `table` and its rank's slot.
  void publish(Table& table, Slots& slots, const std::string& peer,
               std::shared_ptr<const DeviceTargets> targets);

  std::string self_;
  int localCount_ = 0;
  std::map<std::string, DeviceMap> raw_;
  std::map<std::string, int> ranks_;  // set by init, then read-only
  int workerCount_ = 0;
  mutable std::mutex mu_;
  Table requests_, responses_;  // every worker's, from init on
  // Every entry a slot ever pointed to: a peer's entry changes a few times at
  // most (init, a bad device count, the caller's handshake), and a reader
  // without a lock may still hold the one before.
  std::vector<std::shared_ptr<const DeviceTargets>> published_;
  Slots requestsByRank_, responsesByRank_;
};

}  // namespace cuda
}  // namespace rpcjob::runtime
