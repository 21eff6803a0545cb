#include "rpcjob/operator/client.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "json_util.h"
#include "rpcjob/operator/http_cpprest.h"
#include "rpcjob/operator/log.h"

namespace rpcjob::kube {
namespace {

void addParam(std::string& target, const char* name, const std::string& value) {
  if (value.empty()) return;
  target += target.find('?') == std::string::npos ? '?' : '&';
  target += name;
  target += '=';
  target += urlEncode(value);
}

}  // namespace

const char* toString(WatchEventType t) {
  switch (t) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "?";
}

DecodedWatchLine decodeWatchLine(std::string_view line) {
  DecodedWatchLine out;
  std::string error;
  auto v = detail::parseJson(line, &error);
  if (!v) {
    out.error = "watch event is not JSON: " + error;
    return out;
  }
  if (!v->is_object() || !v->has_string_field("type") || !v->has_object_field("object")) {
    out.error = "watch event without type and object";
    return out;
  }
  const std::string type = v->at("type").as_string();
  const auto& obj = v->at("object");
  WatchEvent& ev = out.event;
  if (type == "ADDED") {
    ev.type = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = WatchEventType::kModified;
  } else if (type == "DELETED") {
    ev.type = WatchEventType::kDeleted;
  } else if (type == "BOOKMARK") {
    ev.type = WatchEventType::kBookmark;
  } else if (type == "ERROR") {
    ev.type = WatchEventType::kError;
    ev.errorCode = static_cast<int>(detail::getInt(obj, "code"));
    ev.errorReason = detail::getString(obj, "reason");
    ev.errorMessage = detail::getString(obj, "message");
    out.ok = true;
    return out;
  } else {
    out.error = "unknown watch event type '" + type + "'";
    return out;
  }
  try {
    ev.object = detail::objectFromJson(obj);
  } catch (const std::exception& e) {
    out.error = std::string("bad object in watch event: ") + e.what();
    return out;
  }
  if (ev.type != WatchEventType::kBookmark && ev.object.metadata.name.empty()) {
    out.error = "watch event object has no metadata.name";
    return out;
  }
  out.ok = true;
  return out;
}

Client::Client(std::shared_ptr<HttpClient> http, std::shared_ptr<TokenSource> tokens,
               ClientOptions options)
    : http_(std::move(http)),
      tokens_(std::move(tokens)),
      options_(std::move(options)),
      limiter_(std::make_unique<TokenBucket>(options_.qps, options_.burst)) {}

HttpResponse Client::send(const HttpRequest& req) {
  for (int attempt = 0;; ++attempt) {
    auto wait = limiter_->reserve(std::chrono::steady_clock::now());
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
    HttpResponse resp = http_->send(req);
    if (resp.status != 429 || attempt >= options_.maxRetriesOn429) return resp;
    int seconds = 1;
    auto it = resp.headers.find("retry-after");
    if (it != resp.headers.end()) seconds = std::atoi(it->second.c_str());
    seconds = std::min(std::max(seconds, 1), 10);
    KLOG_DEBUG("client", req.method << " " << req.target << ": 429, retrying in " << seconds
                                    << " s (Retry-After)");
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
  }
}

std::shared_ptr<Client> Client::fromConfig(const ClusterConfig& config, ClientOptions options) {
  HttpClientOptions http;
  http.baseUrl = config.server;
  http.tls = config.tls;
  return std::make_shared<Client>(std::shared_ptr<HttpClient>(makeCpprestHttpClient(http)),
                                  std::make_shared<TokenSource>(config), std::move(options));
}

HttpRequest Client::request(const std::string& method, const std::string& target) const {
  HttpRequest req;
  req.method = method;
  req.target = target;
  req.timeout = options_.timeout;
  req.headers.emplace_back("Accept", "application/json");
  if (tokens_) {
    std::string token = tokens_->token();
    if (!token.empty()) req.headers.emplace_back("Authorization", "Bearer " + token);
  }
  return req;
}

Object Client::call(HttpRequest req) {
  HttpResponse resp = send(req);
  if (resp.status == 0) {
    throw ApiError(0, resp.timedOut ? "Timeout" : "Transport",
                   req.method + " " + req.target + ": " + resp.error);
  }
  if (resp.status < 200 || resp.status > 299) throw ApiError::fromResponse(resp.status, resp.body);
  try {
    return parseObject(resp.body);
  } catch (const std::exception& e) {
    throw ApiError(0, "BadResponse", req.method + " " + req.target + ": " + e.what());
  }
}

Object Client::get(const Resource& r, const std::string& ns, const std::string& name) {
  return call(request("GET", r.itemPath(ns, name)));
}

std::optional<Object> Client::tryGet(const Resource& r, const std::string& ns,
                                     const std::string& name) {
  try {
    return get(r, ns, name);
  } catch (const ApiError& e) {
    if (e.notFound()) return std::nullopt;
    throw;
  }
}

ObjectList Client::list(const Resource& r, const std::string& ns, const ListOptions& options) {
  ObjectList out;
  std::string cont;
  do {
    std::string target = r.collectionPath(ns);
    addParam(target, "labelSelector", options.labelSelector);
    addParam(target, "fieldSelector", options.fieldSelector);
    if (options.pageSize > 0) addParam(target, "limit", std::to_string(options.pageSize));
    addParam(target, "continue", cont);
    HttpRequest req = request("GET", target);
    HttpResponse resp = send(req);
    if (resp.status == 0) {
      throw ApiError(0, resp.timedOut ? "Timeout" : "Transport",
                     "GET " + target + ": " + resp.error);
    }
    if (resp.status < 200 || resp.status > 299)
      throw ApiError::fromResponse(resp.status, resp.body);
    std::string error;
    auto v = detail::parseJson(resp.body, &error);
    if (!v || !v->is_object()) throw ApiError(0, "BadResponse", "GET " + target + ": " + error);
    web::json::value meta =
        v->has_object_field("metadata") ? v->at("metadata") : web::json::value();
    out.resourceVersion = detail::getString(meta, "resourceVersion");
    cont = detail::getString(meta, "continue");
    // Items of a list carry no kind/apiVersion; fill them in from the resource.
    if (v->has_array_field("items")) {
      for (auto& item : v->at("items").as_array()) {
        if (!item.is_object()) continue;
        if (!item.has_field("kind")) item["kind"] = web::json::value::string(r.kind);
        if (!item.has_field("apiVersion"))
          item["apiVersion"] = web::json::value::string(r.apiVersion());
        out.items.push_back(detail::objectFromJson(item));
      }
    }
  } while (!cont.empty());
  return out;
}

Object Client::create(const Resource& r, const std::string& ns, const std::string& json) {
  HttpRequest req = request("POST", r.collectionPath(ns));
  req.contentType = "application/json";
  req.body = json;
  return call(std::move(req));
}

Object Client::replace(const Resource& r, const std::string& ns, const std::string& name,
                       const std::string& json, const std::string& subresource) {
  HttpRequest req = request("PUT", r.itemPath(ns, name, subresource));
  req.contentType = "application/json";
  req.body = json;
  return call(std::move(req));
}

Object Client::mergePatch(const Resource& r, const std::string& ns, const std::string& name,
                          const std::string& patch, const std::string& subresource) {
  HttpRequest req = request("PATCH", r.itemPath(ns, name, subresource));
  req.contentType = "application/merge-patch+json";
  req.body = patch;
  return call(std::move(req));
}

Object Client::apply(const Resource& r, const std::string& ns, const std::string& name,
                     const std::string& body, bool force, const std::string& fieldManager,
                     const std::string& subresource) {
  std::string target = r.itemPath(ns, name, subresource);
  addParam(target, "fieldManager", fieldManager.empty() ? options_.fieldManager : fieldManager);
  if (force) addParam(target, "force", "true");
  HttpRequest req = request("PATCH", target);
  req.contentType = "application/apply-patch+yaml";
  req.body = body;
  return call(std::move(req));
}

void Client::remove(const Resource& r, const std::string& ns, const std::string& name,
                    const DeleteOptions& options) {
  HttpRequest req = request("DELETE", r.itemPath(ns, name));
  web::json::value body = web::json::value::object();
  body["apiVersion"] = web::json::value::string("v1");
  body["kind"] = web::json::value::string("DeleteOptions");
  if (!options.propagationPolicy.empty()) {
    body["propagationPolicy"] = web::json::value::string(options.propagationPolicy);
  }
  if (!options.preconditionUid.empty()) {
    body["preconditions"]["uid"] = web::json::value::string(options.preconditionUid);
  }
  if (options.gracePeriodSeconds) {
    body["gracePeriodSeconds"] = web::json::value::number(*options.gracePeriodSeconds);
  }
  req.contentType = "application/json";
  req.body = body.serialize();
  HttpResponse resp = send(req);
  if (resp.status == 0) {
    throw ApiError(0, resp.timedOut ? "Timeout" : "Transport",
                   "DELETE " + req.target + ": " + resp.error);
  }
  if (resp.status < 200 || resp.status > 299) throw ApiError::fromResponse(resp.status, resp.body);
}

bool Client::removeIfExists(const Resource& r, const std::string& ns, const std::string& name,
                            const DeleteOptions& options) {
  try {
    remove(r, ns, name, options);
    return true;
  } catch (const ApiError& e) {
    if (e.notFound()) return false;
    throw;
  }
}

WatchEnd Client::watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                       const std::function<void(const WatchEvent&)>& onEvent,
                       Cancellation& cancel) {
  std::string target = r.collectionPath(ns);
  addParam(target, "watch", "true");
  addParam(target, "resourceVersion", options.resourceVersion);
  addParam(target, "labelSelector", options.labelSelector);
  addParam(target, "fieldSelector", options.fieldSelector);
  if (options.allowBookmarks) addParam(target, "allowWatchBookmarks", "true");
  addParam(target, "timeoutSeconds", std::to_string(options.timeout.count()));
  HttpRequest req = request("GET", target);
  auto idle = options.idleTimeout.count() > 0
                  ? options.idleTimeout
                  : std::chrono::milliseconds(options.timeout) + std::chrono::seconds(30);

  WatchEnd end;
  end.lastResourceVersion = options.resourceVersion;
  std::optional<ApiError> streamError;
  StreamResult res = http_->stream(
      req, idle,
      [&](std::string_view line) {
        DecodedWatchLine d = decodeWatchLine(line);
        if (!d.ok) {
          streamError.emplace(0, "BadWatchEvent",
                              d.error + ": " + std::string(line.substr(0, 200)));
          return false;
        }
        if (d.event.type == WatchEventType::kError) {
          streamError.emplace(d.event.errorCode, d.event.errorReason, d.event.errorMessage);
          return false;
        }
        if (!d.event.object.metadata.resourceVersion.empty()) {
          end.lastResourceVersion = d.event.object.metadata.resourceVersion;
        }
        if (d.event.type != WatchEventType::kBookmark) ++end.events;
        onEvent(d.event);
        return true;
      },
      cancel);
  end.end = res.end;
  if (streamError) {
    end.end = StreamEnd::kError;
    end.error = std::move(streamError);
  } else if (res.end == StreamEnd::kError) {
    end.error = res.status != 0 ? ApiError::fromResponse(res.status, res.body)
                                : ApiError(0, "Transport", "watch " + target + ": " + res.error);
  }
  return end;
}

HttpResponse Client::raw(const std::string& method, const std::string& target,
                         const std::string& body, const std::string& contentType) {
  HttpRequest req = request(method, target);
  req.body = body;
  req.contentType = contentType;
  return send(req);
}

}  // namespace rpcjob::kube
