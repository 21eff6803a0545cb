#include "rpcjob/planner/gpu_topology.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <numeric>
#include <sstream>

namespace rpcjob::planner {
namespace {

// Terminal escapes (nvidia-smi underlines the header when writing to a terminal).
std::string withoutEscapes(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b') {
      while (i < text.size() && !std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string f;
  while (in >> f) out.push_back(f);
  return out;
}

bool isGpuName(const std::string& s, int& index) {
  if (s.size() < 4 || s.compare(0, 3, "GPU") != 0) return false;
  if (!std::all_of(s.begin() + 3, s.end(), [](char c) { return std::isdigit(c); })) return false;
  index = std::stoi(s.substr(3));
  return true;
}

// Score of a consecutive pair: NVLinks, or 0.
int score(const GpuTopology& t, int a, int b) {
  return t.links[a][b].nvlinks;
}

}  // namespace

bool GpuTopology::nvlinkBetween(int a, int b) const {
  if (a < 0 || b < 0 || a >= gpus || b >= gpus || a == b) return false;
  return links[a][b].nvlink();
}

std::optional<GpuTopology> parseTopoMatrix(const std::string& text, std::string& error) {
  std::istringstream in(withoutEscapes(text));
  std::string line;
  std::vector<std::string> header;  // column names, GPU columns first
  GpuTopology t;
  std::vector<bool> seen;
  while (std::getline(in, line)) {
    const auto f = fields(line);
    if (f.empty()) continue;
    int index = 0;
    if (header.empty()) {
      if (isGpuName(f[0], index) && index == 0 && line.find_first_not_of(" \t") != 0) {
        for (const auto& name : f) {
          int k = 0;
          if (!isGpuName(name, k)) break;
          if (k != static_cast<int>(header.size())) {
            error = "GPU columns out of order: " + name;
            return std::nullopt;
          }
          header.push_back(name);
        }
        t.gpus = static_cast<int>(header.size());
        t.links.assign(t.gpus, std::vector<GpuLink>(t.gpus));
        seen.assign(t.gpus, false);
      }
      continue;
    }
    if (!isGpuName(f[0], index)) {
      if (f[0] == "Legend:") break;
      continue;  // NIC rows
    }
    if (index >= t.gpus) {
      error = "row " + f[0] + " has no column";
      return std::nullopt;
    }
    if (f.size() < header.size() + 1) {
      error = "row " + f[0] + " has " + std::to_string(f.size() - 1) + " entries, " +
              std::to_string(header.size()) + " GPUs";
      return std::nullopt;
    }
    for (int j = 0; j < t.gpus; ++j) {
      const std::string& cell = f[j + 1];
      GpuLink link;
      link.path = cell;
      if (j == index) {
        if (cell != "X") {
          error = "row " + f[0] + ": expected X on the diagonal, got " + cell;
          return std::nullopt;
        }
      } else if (cell.size() > 2 && cell.compare(0, 2, "NV") == 0 &&
                 std::all_of(cell.begin() + 2, cell.end(),
                             [](char c) { return std::isdigit(c); })) {
        link.nvlinks = std::stoi(cell.substr(2));
      } else if (cell != "PIX" && cell != "PXB" && cell != "PHB" && cell != "NODE" &&
                 cell != "SYS" && cell != "SOC") {
        error = "row " + f[0] + ": unknown link '" + cell + "'";
        return std::nullopt;
      }
      t.links[index][j] = link;
    }
    seen[index] = true;
  }
  if (t.gpus == 0) {
    error = "no GPU0 GPU1 ... header (expected the output of `nvidia-smi topo -m`)";
    return std::nullopt;
  }
  for (int i = 0; i < t.gpus; ++i) {
    if (!seen[i]) {
      error = "no row for GPU" + std::to_string(i);
      return std::nullopt;
    }
  }
  for (int i = 0; i < t.gpus; ++i) {
    for (int j = 0; j < t.gpus; ++j) {
      if (t.links[i][j].nvlinks != t.links[j][i].nvlinks) {
        error = "GPU" + std::to_string(i) + " and GPU" + std::to_string(j) +
                " disagree on their NVLinks";
        return std::nullopt;
      }
    }
  }
  return t;
}

std::string describeTopology(const GpuTopology& t) {
  if (!t.known()) return "unknown";
  std::string out = std::to_string(t.gpus) + " GPU(s)";
  if (!t.source.empty()) out += " (" + t.source + ")";
  std::string pairs;
  int pcie = 0;
  for (int i = 0; i < t.gpus; ++i) {
    for (int j = i + 1; j < t.gpus; ++j) {
      if (t.links[i][j].nvlink()) {
        pairs += (pairs.empty() ? "" : ", ") + std::to_string(i) + "-" + std::to_string(j) + " " +
                 t.links[i][j].path;
      } else {
        ++pcie;
      }
    }
  }
  if (t.gpus < 2) return out;
  if (pairs.empty()) return out + ": no NVLink between its GPUs (PCIe)";
  out += ": NVLink " + pairs;
  if (pcie > 0) out += "; " + std::to_string(pcie) + " pair(s) over PCIe only";
  return out;
}

int nvlinkNeighbours(const GpuTopology& t, const std::vector<int>& order) {
  int n = 0;
  for (std::size_t k = 1; k < order.size(); ++k) n += t.nvlinkBetween(order[k - 1], order[k]);
  return n;
}

std::vector<int> neighbourOrder(const GpuTopology& t, int count) {
  const int n = t.known() ? t.gpus : count;
  count = std::clamp(count, 0, n);
  std::vector<int> identity(count);
  std::iota(identity.begin(), identity.end(), 0);
  if (!t.known() || count < 2) return identity;
  // Better = more NVLink-joined neighbours, then more links along them, then the
  // lexicographically smallest order (compared by the caller's iteration order).
  auto value = [&](const std::vector<int>& order) {
    int joined = 0, links = 0;
    for (std::size_t k = 1; k < order.size(); ++k) {
      joined += t.nvlinkBetween(order[k - 1], order[k]);
      links += score(t, order[k - 1], order[k]);
    }
    return std::make_pair(joined, links);
  };
  if (n <= 8) {
    // Every ordered choice of `count` GPUs, in lexicographic order: the first best wins.
    std::vector<int> best = identity;
    auto bestValue = value(best);
    std::vector<int> current;
    std::vector<bool> used(n, false);
    std::function<void()> extend = [&] {
      if (static_cast<int>(current.size()) == count) {
        const auto v = value(current);
        if (v > bestValue) {
          bestValue = v;
          best = current;
        }
        return;
      }
      for (int g = 0; g < n; ++g) {
        if (used[g]) continue;
        used[g] = true;
        current.push_back(g);
        extend();
        current.pop_back();
        used[g] = false;
      }
    };
    extend();
    return best;
  }
  // Greedy: from each start, always the unused GPU with the most links to the last.
  std::vector<int> best = identity;
  auto bestValue = value(best);
  for (int start = 0; start < n; ++start) {
    std::vector<int> order{start};
    std::vector<bool> used(n, false);
    used[start] = true;
    while (static_cast<int>(order.size()) < count) {
      int pick = -1;
      for (int g = 0; g < n; ++g) {
        if (!used[g] && (pick < 0 || score(t, order.back(), g) > score(t, order.back(), pick))) {
          pick = g;
        }
      }
      used[pick] = true;
      order.push_back(pick);
    }
    if (value(order) > bestValue) {
      bestValue = value(order);
      best = order;
    }
  }
  return best;
}

}  // namespace rpcjob::planner
