#include "rpcjob/runner/summary.h"

#include <algorithm>
#include <cstdio>

namespace rpcjob::runner {
namespace {

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string formatBytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%.0f B", bytes);
  } else {
    std::snprintf(text, sizeof text, bytes < 10 ? "%.2f %s" : "%.1f %s", bytes, kUnits[unit]);
  }
  return text;
}

std::string renderSummary(const std::vector<WorkerSummary>& workers) {
  std::vector<std::vector<std::string>> rows = {
      {"WORKER", "RANK", "EXIT", "RESTARTS", "CHANNEL", "SENT", "RECEIVED"}};
  std::string warnings;
  for (const auto& w : workers) {
    std::vector<std::string> head = {w.name, std::to_string(w.rank), w.status.toString(),
                                     std::to_string(w.restarts)};
    if (!w.traffic.found) {
      head.insert(head.end(), {"-", "-", "-", "(no metrics file)"});
      rows.push_back(head);
    } else if (w.traffic.bytes.empty()) {
      head.insert(head.end(), {"-", "0 B", "0 B"});
      rows.push_back(head);
    } else {
      bool first = true;
      for (const auto& [channel, bytes] : w.traffic.bytes) {
        std::vector<std::string> row = first ? head : std::vector<std::string>{"", "", "", ""};
        row.insert(row.end(), {channel, formatBytes(bytes.sent), formatBytes(bytes.received)});
        rows.push_back(row);
        first = false;
      }
    }
    for (const auto& warning : w.traffic.warnings) {
      warnings += "warning: " + w.name + " metrics file: " + warning + "\n";
    }
  }
  return table(rows) + warnings;
}

}  // namespace rpcjob::runner
