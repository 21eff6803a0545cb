#pragma once
// Where the API server is and how to authenticate: from a kubeconfig file or from
// inside a pod (service account). Mirrors client-go's rules, reduced to what the
// operator needs: token and client-certificate users; no exec or auth-provider
// plugins (a kubeconfig using them is refused with a clear error).

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "rpcjob/operator/http.h"

namespace rpcjob::kube {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ClusterConfig {
  std::string server;      // "https://host:port", no trailing slash
  TlsOptions tls;          // CA, client certificate and key as PEM
  std::string token;       // a static bearer token, or
  std::string tokenFile;   // a file holding it, re-read (a projected, rotating token)
  std::string namespace_;  // the context's namespace, or the pod's; "default" if none
  std::string source;      // where it came from, for logs: a path or "in-cluster"
};

// Parses a kubeconfig. `context` empty: the file's current-context. Relative file
// paths in it are resolved against `baseDir`. Throws ConfigError.
ClusterConfig parseKubeconfig(const std::string& yaml, const std::string& baseDir,
                              const std::string& context = "");
ClusterConfig loadKubeconfig(const std::string& path, const std::string& context = "");

// Paths and environment of the in-cluster config, injectable for tests.
struct InClusterEnv {
  std::string serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";
  std::function<const char*(const char*)> getenv = [](const char* n) { return std::getenv(n); };
};
// From KUBERNETES_SERVICE_HOST/PORT, the service-account token, ca.crt and
// namespace. Throws ConfigError when not in a pod.
ClusterConfig loadInCluster(const InClusterEnv& env = {});

// The operator's rule: --kubeconfig FILE, else $KUBECONFIG (first existing entry),
// else in-cluster when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config.
ClusterConfig loadDefaultConfig(const std::string& kubeconfigFlag, const InClusterEnv& env = {});

std::string base64Decode(const std::string& in);  // throws ConfigError on bad input

// The bearer token of a config, re-read from tokenFile at most every `refresh`
// (client-go re-reads a projected token every minute; kubelet rotates it well
// before it expires). A failed re-read keeps the last good token.
// Thread-safety: token() may be called from any thread.
class TokenSource {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  explicit TokenSource(
      const ClusterConfig& config, std::chrono::milliseconds refresh = std::chrono::seconds(60),
      Clock clock = [] { return std::chrono::steady_clock::now(); });
  std::string token();

 private:
  std::mutex mu_;
  std::string token_;
  std::string file_;
  std::chrono::milliseconds refresh_;
  Clock clock_;
  std::chrono::steady_clock::time_point readAt_{};
  bool loaded_ = false;
};

}  // namespace rpcjob::kube
