#pragma once
// Reading a worker's final metrics file (RPCJOB_METRICS_FILE, Prometheus text
// format 0.0.4) for the summary table: bytes sent and received per channel, from
// `rpcjob_channel_bytes_total{channel="...",direction="send"|"recv",...}` summed
// over every other label (peer, devices). See metrics/README.md.
//
// The file is written by another program and may be cut short or malformed: every
// line that does not parse becomes a warning naming the line, never an exception.

#include <map>
#include <string>
#include <vector>

namespace rpcjob::runner {

inline constexpr const char* kChannelBytesMetric = "rpcjob_channel_bytes_total";

struct ChannelBytes {
  double sent = 0;
  double received = 0;
};

struct ChannelTraffic {
  bool found = false;                         // the file existed and was read
  std::map<std::string, ChannelBytes> bytes;  // by channel name
  std::vector<std::string> warnings;
};

// Parses the text of a metrics file (found = true).
ChannelTraffic parseChannelTraffic(const std::string& text);
// Reads and parses `path`; found = false (and no warning) when it does not exist.
ChannelTraffic readChannelTraffic(const std::string& path);

}  // namespace rpcjob::runner
