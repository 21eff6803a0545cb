// A worker process for the runtime tests: serves the test functions until every
// worker (the test driver is rank 0) shuts down. Identity from the environment.
#include <iostream>

#include "rpcjob/runtime/runtime.h"
#include "test_functions.h"

int main() {
  using namespace rpcjob::runtime;
  try {
    auto rt = Runtime::fromEnvironment();
    rpcjob::testing::registerTestFunctions(*rt);
    rt->start();
    rpcjob::testing::markStarted();
    rt->shutdown(ShutdownMode::kGraceful, std::chrono::seconds(300));
  } catch (const std::exception& e) {
    std::cerr << "test worker: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
