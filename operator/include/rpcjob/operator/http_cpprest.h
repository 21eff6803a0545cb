#pragma once
// The cpprestsdk implementation of HttpClient. This header is light on purpose:
// the heavy cpprest headers are included by http_cpprest.cc alone.

#include <memory>

#include "rpcjob/operator/http.h"

namespace rpcjob::kube {

// Thread-safety: the returned client may be used from many threads at once.
std::unique_ptr<HttpClient> makeCpprestHttpClient(const HttpClientOptions& options);

}  // namespace rpcjob::kube
