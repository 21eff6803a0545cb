#include "spin_wait.h"

#include <cstdio>
#include <cstdlib>

#include "cpu_budget.h"

namespace rpcjob::runtime {

std::chrono::microseconds defaultSpinBudget(double availableCpus) {
  return std::chrono::microseconds(availableCpus >= 8 ? 1000 : 50);
}

std::chrono::microseconds spinBudget() {
  static const std::chrono::microseconds budget = [] {
    const auto fallback = defaultSpinBudget(availableCpus());
    const char* text = std::getenv("RPCJOB_SPIN_US");
    if (text == nullptr || *text == '\0') return fallback;
    char* end = nullptr;
    long value = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < 0 || value > 1000000) {
      std::fprintf(stderr,
                   "rpcjob: RPCJOB_SPIN_US=%s is not a number of microseconds in [0, 1000000]; "
                   "using %lld\n",
                   text, static_cast<long long>(fallback.count()));
      return fallback;
    }
    return std::chrono::microseconds(value);
  }();
  return budget;
}

}  // namespace rpcjob::runtime
