#include "rpcjob/operator/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace rpcjob::kube {
namespace {
std::atomic<int> gLevel{static_cast<int>(LogLevel::kInfo)};
std::mutex gMu;
}  // namespace

void setLogLevel(LogLevel level) {
  gLevel = static_cast<int>(level);
}
bool logEnabled(LogLevel level) {
  return static_cast<int>(level) >= gLevel.load();
}

void logLine(LogLevel level, const std::string& component, const std::string& message) {
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  std::lock_guard<std::mutex> lock(gMu);
  std::fprintf(stderr, "%s.%03dZ %c %s: %s\n", ts, ms, kLetters[static_cast<int>(level)],
               component.c_str(), message.c_str());
}

}  // namespace rpcjob::kube
