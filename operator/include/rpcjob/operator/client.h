#pragma once
// A Kubernetes API client over HttpClient: typed-ish calls on Resources, objects
// as kube::Object (metadata parsed, body as JSON text). Every call has a deadline.
// Failures throw ApiError (see errors.h), except watch(), which reports how it
// ended as a value.
//
// Thread-safety: a Client may be used from many threads at once.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rpcjob/operator/cancellation.h"
#include "rpcjob/operator/config.h"
#include "rpcjob/operator/errors.h"
#include "rpcjob/operator/http.h"
#include "rpcjob/operator/object.h"
#include "rpcjob/operator/resource.h"
#include "rpcjob/operator/token_bucket.h"

namespace rpcjob::kube {

struct ClientOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};  // per call
  std::string fieldManager = "rpcjob-operator";                 // server-side apply
  // Client-side rate limit on every request but watches (token_bucket.h); qps 0:
  // none. rpcjob-operator sets 20/40 (--qps, --burst).
  double qps = 0;
  int burst = 0;
  // A 429 (Too Many Requests) is retried after its Retry-After (at most 10 s,
  // default 1 s) up to this many times, then surfaces as a retryable ApiError.
  int maxRetriesOn429 = 3;
};

struct ListOptions {
  std::string labelSelector;
  std::string fieldSelector;
  int64_t pageSize = 500;  // list() follows "continue" until the end
};

struct WatchOptions {
  std::string resourceVersion;  // where to start: usually the list's
  std::string labelSelector;
  std::string fieldSelector;
  bool allowBookmarks = true;
  std::chrono::seconds timeout{300};  // the server ends the watch after this (timeoutSeconds)
  // No line (event or bookmark) for this long ends the watch as kIdle.
  // 0: timeout + 30 s.
  std::chrono::milliseconds idleTimeout{0};
};

struct DeleteOptions {
  std::string propagationPolicy;  // "Background", "Foreground", "Orphan" or empty
  std::string preconditionUid;    // delete only this incarnation
  std::optional<int64_t> gracePeriodSeconds;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };
const char* toString(WatchEventType t);

struct WatchEvent {
  WatchEventType type = WatchEventType::kError;
  Object object;  // for kBookmark only metadata.resourceVersion is meaningful
  // kError: the Status the server sent (410 "Expired" when the version is too old).
  int errorCode = 0;
  std::string errorReason;
  std::string errorMessage;
};

// One line of a watch stream. Bad input (not JSON, no type, unknown type, no
// object) gives ok == false and a message; it never throws.
struct DecodedWatchLine {
  bool ok = false;
  std::string error;
  WatchEvent event;
};
DecodedWatchLine decodeWatchLine(std::string_view line);

struct WatchEnd {
  StreamEnd end = StreamEnd::kError;
  // For kError: what went wrong (HTTP status or ERROR event, e.g. gone() → relist;
  // undecodable line: code 0, reason "BadWatchEvent").
  std::optional<ApiError> error;
  std::string lastResourceVersion;  // of the last event or bookmark seen
  int events = 0;                   // events delivered (bookmarks not counted)
};

class Client {
 public:
  Client(std::shared_ptr<HttpClient> http, std::shared_ptr<TokenSource> tokens,
         ClientOptions options = {});
  // The cpprestsdk client for a config (see config.h).
  static std::shared_ptr<Client> fromConfig(const ClusterConfig& config,
                                            ClientOptions options = {});

  // Reading
  Object get(const Resource& r, const std::string& ns, const std::string& name);
  std::optional<Object> tryGet(const Resource& r, const std::string& ns, const std::string& name);
  ObjectList list(const Resource& r, const std::string& ns, const ListOptions& options = {});

  // Writing. Bodies are JSON text (apply also takes YAML).
  Object create(const Resource& r, const std::string& ns, const std::string& json);
  // PUT: fails with 409 when the body's resourceVersion is stale.
  Object replace(const Resource& r, const std::string& ns, const std::string& name,
                 const std::string& json, const std::string& subresource = "");
  // application/merge-patch+json (RFC 7386).
  Object mergePatch(const Resource& r, const std::string& ns, const std::string& name,
                    const std::string& patch, const std::string& subresource = "");
  // Server-side apply (application/apply-patch+yaml); fieldManager empty: the
  // client's. force: take over fields other managers own.
  Object apply(const Resource& r, const std::string& ns, const std::string& name,
               const std::string& body, bool force = true, const std::string& fieldManager = "",
               const std::string& subresource = "");
  Object updateStatus(const Resource& r, const std::string& ns, const std::string& name,
                      const std::string& json) {
    return replace(r, ns, name, json, "status");
  }
  Object patchStatus(const Resource& r, const std::string& ns, const std::string& name,
                     const std::string& patch) {
    return mergePatch(r, ns, name, patch, "status");
  }
  void remove(const Resource& r, const std::string& ns, const std::string& name,
              const DeleteOptions& options = {});
  // remove() that treats 404 as done. Returns false when it was already gone.
  bool removeIfExists(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {});

  // Watching: one watch call, blocking until it ends (server timeout, idle,
  // cancel, error). onEvent runs on the calling thread for every event except
  // ERROR, which ends the watch with WatchEnd::error set.
  WatchEnd watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                 const std::function<void(const WatchEvent&)>& onEvent, Cancellation& cancel);

  // Any request, with this client's auth and deadline (for /readyz, /version, ...).
  HttpResponse raw(const std::string& method, const std::string& target,
                   const std::string& body = "", const std::string& contentType = "");

  const ClientOptions& options() const { return options_; }

 private:
  HttpRequest request(const std::string& method, const std::string& target) const;
  Object call(HttpRequest req);
  // Every request goes through here: the rate limit, then Retry-After on 429.
  HttpResponse send(const HttpRequest& req);

  std::shared_ptr<HttpClient> http_;
  std::shared_ptr<TokenSource> tokens_;
  ClientOptions options_;
  std::unique_ptr<TokenBucket> limiter_;
};

}  // namespace rpcjob::kube
