#pragma once
// Writing an RpcJob back out. The operator writes status through the API server as
// JSON (statusToJson, a body for the status subresource's merge patch); tools
// show the defaulted spec as YAML. parseRpcJob(toYaml(job)) gives the job back.

#include <string>

#include "rpcjob/api/types.h"

namespace rpcjob::api {

// {"phase": ..., "conditions": [...], ...}: the status object alone.
std::string statusToJson(const RpcJobStatus& status);
// The spec alone, as JSON, defaults filled in.
std::string specToJson(const RpcJobSpec& spec);
// The whole resource (apiVersion, kind, metadata, spec, status if any) as YAML.
std::string toYaml(const RpcJob& job);

}  // namespace rpcjob::api
