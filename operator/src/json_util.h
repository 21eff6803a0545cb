#pragma once
// Private helpers over cpprestsdk's web::json for the .cc files of this folder.

#include <cpprest/json.h>

#include <optional>
#include <string>
#include <string_view>

#include "rpcjob/operator/object.h"

namespace rpcjob::kube::detail {

// Parses JSON text; nullopt (and `error` set) when it is not JSON.
std::optional<web::json::value> parseJson(std::string_view text, std::string* error = nullptr);

std::string getString(const web::json::value& v, const char* key);
int64_t getInt(const web::json::value& v, const char* key);

ObjectMeta parseMeta(const web::json::value& metadata);
Object objectFromJson(const web::json::value& v);

}  // namespace rpcjob::kube::detail
