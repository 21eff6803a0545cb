#include "cgroup_files.h"

#include <fstream>
#include <sstream>

namespace rpcjob::runtime {

std::string readWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string ownCgroup(const std::string& procSelfCgroup, const std::string& controller) {
  std::istringstream in(procSelfCgroup);
  for (std::string line; std::getline(in, line);) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match =
        controller.empty()
            ? line.compare(0, first, "0") == 0 && controllers.empty()
            : ("," + controllers + ",").find("," + controller + ",") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return {};
}

}  // namespace rpcjob::runtime
