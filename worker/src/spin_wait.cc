#include "spin_wait.h"

#include <cstdio>
#include <cstdlib>

#include "cpu_budget.h"

namespace rpcjob::runtime {

std::chrono::microseconds defaultSpinBudget(double availableCpus) {
  return availableCpus >= 8 ? std::chrono::microseconds(1000) : kShortSpin;
}

std::chrono::microseconds microsecondsFromEnvironment(const char* name,
                                                      std::chrono::microseconds fallback,
                                                      long long max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || value < 0 || value > max) {
    std::fprintf(stderr, "rpcjob: %s=%s is not a number of microseconds in [0, %lld]; using %lld\n",
                 name, text, max, static_cast<long long>(fallback.count()));
    return fallback;
  }
  return std::chrono::microseconds(value);
}

std::chrono::microseconds spinBudget() {
  static const std::chrono::microseconds budget =
      microsecondsFromEnvironment("RPCJOB_SPIN_US", defaultSpinBudget(availableCpus()), 1000000);
  return budget;
}

}  // namespace rpcjob::runtime
