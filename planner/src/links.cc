#include "detail/links.h"

namespace rpcjob::planner::detail {

Link linkBetween(bool samePod, bool bothRdma, bool bothGpus, const api::RpcJobSpec& spec) {
  return linkFor(PairPlace{samePod, bothRdma, bothGpus}, spec.transports, spec.channels);
}

LinkTable::LinkTable(const api::RpcJobSpec& spec) {
  for (int key = 0; key < 8; ++key) {
    links_[key] = linkBetween(key & 4, key & 2, key & 1, spec);
  }
}

}  // namespace rpcjob::planner::detail
