// rpcjob: validate, plan and run RpcJob manifests on this machine (runner/README.md).

#include <string>
#include <vector>

#include "rpcjob/runner/cli.h"

int main(int argc, char** argv) {
  return rpcjob::runner::runCli(std::vector<std::string>(argv + 1, argv + argc));
}
