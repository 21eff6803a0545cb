#include "owned_metadata.h"

#include "rpcjob/api/types.h"

namespace rpcjob::op {

using web::json::value;

value ownedMetadata(const JobRef& job, const std::string& name, value labels) {
  value ref = value::object();
  ref["apiVersion"] = value::string(api::kApiVersion);
  ref["kind"] = value::string(api::kKind);
  ref["name"] = value::string(job.name);
  ref["uid"] = value::string(job.uid);
  ref["controller"] = value::boolean(true);
  ref["blockOwnerDeletion"] = value::boolean(true);
  labels[kLabelName] = value::string(kWorkerAppName);
  labels[kLabelInstance] = value::string(job.name);
  labels[kLabelManagedBy] = value::string(kManagedBy);
  labels[kLabelJobName] = value::string(job.name);
  value m = value::object();
  m["name"] = value::string(name);
  m["namespace"] = value::string(job.ns);
  m["labels"] = labels;
  m["ownerReferences"][0] = ref;
  return m;
}

}  // namespace rpcjob::op
