#pragma once
// One-line structured-enough logging to stderr: "2025-01-01T00:00:00.123Z I informer: text".
// Thread-safety: lines from different threads never interleave.

#include <sstream>
#include <string>

namespace rpcjob::kube {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void logLine(LogLevel level, const std::string& component, const std::string& message);
void setLogLevel(LogLevel level);  // lines below it are dropped; default kInfo
bool logEnabled(LogLevel level);

}  // namespace rpcjob::kube

#define RPCJOB_KLOG(level, component, expr)                           \
  do {                                                                \
    if (::rpcjob::kube::logEnabled(level)) {                          \
      std::ostringstream rpcjob_klog_s;                               \
      rpcjob_klog_s << expr;                                          \
      ::rpcjob::kube::logLine(level, component, rpcjob_klog_s.str()); \
    }                                                                 \
  } while (0)
#define KLOG_INFO(component, expr) RPCJOB_KLOG(::rpcjob::kube::LogLevel::kInfo, component, expr)
#define KLOG_WARN(component, expr) RPCJOB_KLOG(::rpcjob::kube::LogLevel::kWarning, component, expr)
#define KLOG_ERROR(component, expr) RPCJOB_KLOG(::rpcjob::kube::LogLevel::kError, component, expr)
#define KLOG_DEBUG(component, expr) RPCJOB_KLOG(::rpcjob::kube::LogLevel::kDebug, component, expr)
