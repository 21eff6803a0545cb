#pragma once
// The pieces of the RpcJob parser, one file each (parse.cc, parse_template.cc,
// parse_status.cc).

#include <yaml-cpp/yaml.h>

#include <string>

#include "detail/reader.h"
#include "rpcjob/api/types.h"

namespace rpcjob::api::detail {

PodTemplate readPodTemplate(Reader& r, const YAML::Node& node, const std::string& path);
RpcJobStatus readStatus(Reader& r, const YAML::Node& node, const std::string& path);

}  // namespace rpcjob::api::detail
