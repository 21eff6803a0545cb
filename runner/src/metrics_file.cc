#include "rpcjob/runner/metrics_file.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

namespace rpcjob::runner {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

bool isNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// One sample line: name[{k="v",...}] value [timestamp]. nullopt + `error` when malformed.
std::optional<Sample> parseSample(const std::string& line, std::string& error) {
  Sample s;
  std::size_t i = 0;
  while (i < line.size() && isNameChar(line[i], i == 0)) ++i;
  if (i == 0) {
    error = "expected a metric name";
    return std::nullopt;
  }
  s.name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      const std::size_t keyStart = i;
      while (i < line.size() && isNameChar(line[i], i == keyStart)) ++i;
      const std::string key = line.substr(keyStart, i - keyStart);
      if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        error = "malformed label";
        return std::nullopt;
      }
      i += 2;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < line.size()) {
          const char e = line[i++];
          value += e == 'n' ? '\n' : e;
        } else {
          value += c;
        }
      }
      if (!closed) {
        error = "unterminated label value";
        return std::nullopt;
      }
      s.labels[key] = value;
      if (i < line.size() && line[i] == ',')
        ++i;
      else if (i >= line.size() || line[i] != '}') {
        error = "expected ',' or '}' after a label";
        return std::nullopt;
      }
    }
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  const std::size_t valueEnd = line.find_first_of(" \t", i);
  const std::string valueText =
      line.substr(i, valueEnd == std::string::npos ? valueEnd : valueEnd - i);
  if (valueText.empty()) {
    error = "missing value";
    return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  s.value = std::strtod(valueText.c_str(), &end);
  if (end == valueText.c_str() || *end != '\0' || errno == ERANGE) {
    error = "value '" + valueText + "' is not a number";
    return std::nullopt;
  }
  return s;
}

}  // namespace

ChannelTraffic parseChannelTraffic(const std::string& text) {
  ChannelTraffic out;
  out.found = true;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    // Only our metric matters; other families are not even parsed.
    if (line.compare(start, std::strlen(kChannelBytesMetric), kChannelBytesMetric) != 0) continue;
    std::string error;
    const auto sample = parseSample(line.substr(start), error);
    if (!sample) {
      out.warnings.push_back("line " + std::to_string(number) + ": " + error);
      continue;
    }
    if (sample->name != kChannelBytesMetric) continue;  // a longer name with our prefix
    const auto channel = sample->labels.find("channel");
    const auto direction = sample->labels.find("direction");
    if (channel == sample->labels.end() || direction == sample->labels.end()) {
      out.warnings.push_back("line " + std::to_string(number) + ": no channel or direction label");
      continue;
    }
    if (!std::isfinite(sample->value) || sample->value < 0) {
      out.warnings.push_back("line " + std::to_string(number) + ": byte count " +
                             std::to_string(sample->value) + " is not a count");
      continue;
    }
    ChannelBytes& bytes = out.bytes[channel->second];
    if (direction->second == "send") {
      bytes.sent += sample->value;
    } else if (direction->second == "recv") {
      bytes.received += sample->value;
    } else {
      out.warnings.push_back("line " + std::to_string(number) + ": unknown direction '" +
                             direction->second + "'");
    }
  }
  return out;
}

ChannelTraffic readChannelTraffic(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return {};
  std::ostringstream text;
  text << file.rdbuf();
  return parseChannelTraffic(text.str());
}

}  // namespace rpcjob::runner
