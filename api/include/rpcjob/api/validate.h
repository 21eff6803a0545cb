#pragma once
// The RpcJob validation rules: the CRD's rules (its CEL, which v1.20 ignores) and
// the ones CEL cannot say. One implementation, shared by the operator and the
// local runner.
//
//  - metadata.name: a DNS-1035 label; every pod name it yields stays <= 63;
//  - spec.workers: at least one group, names DNS labels starting with a letter,
//    unique; derived worker names unique and <= 63; replicas >= 1; gpusPerWorker
//    >= 0; total workers <= kMaxWorkers; no nvidia.com/gpu in the template (set
//    gpusPerWorker); cpu and memory requests are quantities >= 0; affinity and
//    toleration operators well formed;
//  - transports and channels: known names, no repeats;
//  - deviceMaps: explicit maps name two different GPU workers, devices cuda:k with
//    k below each side's gpusPerWorker, one-to-one, and consistent with the map
//    given for the reverse direction (if any);
//  - runPolicy and metrics: numbers in range.

#include <vector>

#include "rpcjob/api/errors.h"
#include "rpcjob/api/types.h"

namespace rpcjob::api {

// Every rule broken, in field order. `lines` (from parsing) puts lines on errors.
std::vector<FieldError> validateRpcJob(const RpcJob& job, const SourceMap& lines = {});

}  // namespace rpcjob::api
