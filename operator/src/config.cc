#include "rpcjob/operator/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace rpcjob::kube {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool fileExists(const std::string& path) {
  return std::ifstream(path).good();
}

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(s.find_last_not_of(ws) + 1);
  s.erase(0, s.find_first_not_of(ws));
  return s;
}

std::string resolve(const std::string& path, const std::string& baseDir) {
  if (path.empty() || path[0] == '/' || baseDir.empty()) return path;
  return baseDir + "/" + path;
}

std::string dirOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

YAML::Node findNamed(const YAML::Node& list, const std::string& name, const char* what) {
  if (list && list.IsSequence()) {
    for (const auto& item : list) {
      if (item["name"] && item["name"].as<std::string>() == name) return item;
    }
  }
  throw ConfigError(std::string("kubeconfig: no ") + what + " named '" + name + "'");
}

std::string str(const YAML::Node& n, const char* key) {
  return n && n[key] && n[key].IsScalar() ? n[key].as<std::string>() : std::string();
}

// PEM from "<key>-data" (base64) or the file "<key>".
std::string pem(const YAML::Node& n, const std::string& key, const std::string& baseDir) {
  std::string data = str(n, (key + "-data").c_str());
  if (!data.empty()) return base64Decode(data);
  std::string file = str(n, key.c_str());
  return file.empty() ? std::string() : readFile(resolve(file, baseDir));
}

}  // namespace

std::string base64Decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ' || c == '\t') continue;
    int v = value(c);
    if (v < 0) throw ConfigError("bad base64 data");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

ClusterConfig parseKubeconfig(const std::string& yaml, const std::string& baseDir,
                              const std::string& contextName) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(std::string("kubeconfig: not YAML: ") + e.what());
  }
  if (!root.IsMap()) throw ConfigError("kubeconfig: not a mapping");
  std::string name = contextName.empty() ? str(root, "current-context") : contextName;
  if (name.empty()) throw ConfigError("kubeconfig: no current-context");
  YAML::Node context = findNamed(root["contexts"], name, "context")["context"];
  if (!context) throw ConfigError("kubeconfig: context '" + name + "' is empty");
  YAML::Node cluster = findNamed(root["clusters"], str(context, "cluster"), "cluster")["cluster"];

  ClusterConfig config;
  config.source = "kubeconfig context " + name;
  config.server = str(cluster, "server");
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  if (config.server.empty()) throw ConfigError("kubeconfig: cluster has no server");
  config.tls.caPem = pem(cluster, "certificate-authority", baseDir);
  config.tls.insecureSkipVerify = str(cluster, "insecure-skip-tls-verify") == "true";
  config.namespace_ = str(context, "namespace");
  if (config.namespace_.empty()) config.namespace_ = "default";

  std::string userName = str(context, "user");
  if (!userName.empty()) {
    YAML::Node user = findNamed(root["users"], userName, "user")["user"];
    if (user && (user["exec"] || user["auth-provider"])) {
      throw ConfigError("kubeconfig: user '" + userName +
                        "' uses an exec or auth-provider plugin, which rpcjob-operator does not "
                        "support; use a token or a client certificate");
    }
    config.token = str(user, "token");
    std::string tokenFile = str(user, "tokenFile");
    if (!tokenFile.empty()) config.tokenFile = resolve(tokenFile, baseDir);
    config.tls.clientCertPem = pem(user, "client-certificate", baseDir);
    config.tls.clientKeyPem = pem(user, "client-key", baseDir);
    if (config.tls.clientCertPem.empty() != config.tls.clientKeyPem.empty()) {
      throw ConfigError("kubeconfig: user '" + userName +
                        "' needs both client-certificate and client-key");
    }
  }
  return config;
}

ClusterConfig loadKubeconfig(const std::string& path, const std::string& context) {
  ClusterConfig c = parseKubeconfig(readFile(path), dirOf(path), context);
  c.source = path + " (" + c.source + ")";
  return c;
}

ClusterConfig loadInCluster(const InClusterEnv& env) {
  const char* host = env.getenv("KUBERNETES_SERVICE_HOST");
  const char* port = env.getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !*host || !port || !*port) {
    throw ConfigError("not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set");
  }
  ClusterConfig c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";  // IPv6
  c.server = "https://" + h + ":" + port;
  c.tokenFile = env.serviceAccountDir + "/token";
  c.tls.caPem = readFile(env.serviceAccountDir + "/ca.crt");
  if (!fileExists(c.tokenFile)) throw ConfigError("no service-account token at " + c.tokenFile);
  std::string nsFile = env.serviceAccountDir + "/namespace";
  c.namespace_ = fileExists(nsFile) ? trim(readFile(nsFile)) : "default";
  c.source = "in-cluster";
  return c;
}

ClusterConfig loadDefaultConfig(const std::string& flag, const InClusterEnv& env) {
  if (!flag.empty()) return loadKubeconfig(flag);
  if (const char* kc = env.getenv("KUBECONFIG"); kc && *kc) {
    std::stringstream list(kc);
    std::string entry;
    while (std::getline(list, entry, ':')) {
      if (!entry.empty() && fileExists(entry)) return loadKubeconfig(entry);
    }
  }
  if (const char* h = env.getenv("KUBERNETES_SERVICE_HOST"); h && *h) return loadInCluster(env);
  if (const char* home = env.getenv("HOME"); home && *home) {
    std::string path = std::string(home) + "/.kube/config";
    if (fileExists(path)) return loadKubeconfig(path);
  }
  throw ConfigError("no configuration: pass --kubeconfig, set KUBECONFIG, or run in a pod");
}

TokenSource::TokenSource(const ClusterConfig& config, std::chrono::milliseconds refresh,
                         Clock clock)
    : token_(config.token), file_(config.tokenFile), refresh_(refresh), clock_(std::move(clock)) {}

std::string TokenSource::token() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_.empty()) return token_;
  auto now = clock_();
  if (!loaded_ || now - readAt_ >= refresh_) {
    try {
      std::string t = trim(readFile(file_));
      if (!t.empty()) token_ = t;
    } catch (const ConfigError&) {
      // Keep the last good token; the API server answers 401 if it is stale.
    }
    readAt_ = now;
    loaded_ = true;
  }
  return token_;
}

}  // namespace rpcjob::kube
