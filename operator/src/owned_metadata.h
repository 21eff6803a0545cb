#pragma once
// The metadata of every object the operator creates for a job (its Service,
// ConfigMap, Pods, Secret, NetworkPolicy): name and namespace, the worker labels
// (children.h's kLabel*) over `labels`, and a controller ownerReference to the job,
// so that garbage collection deletes the object with the job.

#include <cpprest/json.h>

#include <string>

#include "rpcjob/operator/children.h"

namespace rpcjob::op {

web::json::value ownedMetadata(const JobRef& job, const std::string& name,
                               web::json::value labels = web::json::value::object());

}  // namespace rpcjob::op
