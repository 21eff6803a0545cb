#include "rpcjob/api/quantity.h"

#include <cctype>
#include <cstdint>
#include <limits>

namespace rpcjob::api {
namespace {

using Wide = unsigned __int128;
constexpr Wide kCap = static_cast<Wide>(std::numeric_limits<int64_t>::max());

// The suffix as a power of ten and a power of two; false when unknown.
bool parseSuffix(const std::string& s, int& exp10, int& exp2) {
  exp10 = 0;
  exp2 = 0;
  static const char* const kBinary[] = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  for (int i = 0; i < 6; ++i) {
    if (s == kBinary[i]) {
      exp2 = 10 * (i + 1);
      return true;
    }
  }
  static const struct {
    const char* suffix;
    int exp10;
  } kDecimal[] = {{"n", -9}, {"u", -6}, {"m", -3}, {"", 0},   {"k", 3},
                  {"M", 6},  {"G", 9},  {"T", 12}, {"P", 15}, {"E", 18}};
  for (const auto& d : kDecimal) {
    if (s == d.suffix) {
      exp10 = d.exp10;
      return true;
    }
  }
  // A decimal exponent: e3, E-2, e+6.
  if (s.size() < 2 || (s[0] != 'e' && s[0] != 'E')) return false;
  std::size_t i = 1;
  bool negative = false;
  if (s[i] == '+' || s[i] == '-') negative = s[i++] == '-';
  if (i == s.size() || s.size() - i > 3) return false;
  int value = 0;
  for (; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    value = value * 10 + (s[i] - '0');
  }
  exp10 = negative ? -value : value;
  return true;
}

Wide saturatingMul(Wide a, Wide b) {
  if (a == 0 || b == 0) return 0;
  if (a > kCap / b) return kCap + 1;
  return a * b;
}

}  // namespace

int64_t Quantity::value() const {
  if (milli >= 0) return milli / 1000 + (milli % 1000 != 0 ? 1 : 0);
  return milli / 1000;  // towards zero, which is up for negatives
}

std::optional<Quantity> parseQuantity(const std::string& text) {
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  Wide mantissa = 0;
  int digits = 0;
  int fractionDigits = 0;
  bool dot = false;
  int droppedIntegerDigits = 0;  // beyond 22 significant digits: kept as a power of ten
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (dot) return std::nullopt;
      dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    ++digits;
    // Past this size further digits cannot change the (saturated or rounded) result
    // by more than the rounding we already do; integer digits still scale it.
    if (mantissa > kCap * 1000) {
      if (!dot) ++droppedIntegerDigits;
      continue;
    }
    mantissa = mantissa * 10 + static_cast<Wide>(c - '0');
    if (dot) ++fractionDigits;
  }
  if (digits == 0) return std::nullopt;
  int exp10 = 0;
  int exp2 = 0;
  if (!parseSuffix(text.substr(i), exp10, exp2)) return std::nullopt;

  // milli = ceil(mantissa * 10^(exp10 - fractionDigits + 3) * 2^exp2)
  int scale = exp10 - fractionDigits + droppedIntegerDigits + 3;
  Wide value = mantissa;
  for (int k = 0; k < exp2 && value <= kCap; ++k) value = saturatingMul(value, 2);
  for (; scale > 0 && value <= kCap; --scale) value = saturatingMul(value, 10);
  if (scale < 0) {
    Wide divisor = 1;
    bool tiny = false;
    for (; scale < 0; ++scale) {
      if (divisor > kCap * 1000) {
        tiny = true;
        break;
      }
      divisor *= 10;
    }
    value = tiny ? (value != 0 ? 1 : 0) : value / divisor + (value % divisor != 0 ? 1 : 0);
  }
  if (value > kCap) value = kCap;
  Quantity q;
  q.milli = static_cast<int64_t>(value);
  if (negative) q.milli = -q.milli;
  return q;
}

}  // namespace rpcjob::api
