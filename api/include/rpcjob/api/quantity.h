#pragma once
// Kubernetes resource quantities ("500m", "2", "1Gi", "512Mi", "1e3", "1.5"):
//   <quantity> ::= <sign><digits>[.<digits>]<suffix>
//   <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E
//                | e<signed int> | E<signed int>
// Values are rounded up, as Kubernetes does for Value() and MilliValue().

#include <cstdint>
#include <optional>
#include <string>

namespace rpcjob::api {

struct Quantity {
  // The value in thousandths, rounded up ("500m" -> 500, "1Gi" -> 1073741824000);
  // saturates at INT64_MAX.
  int64_t milli = 0;

  // Whole units rounded up ("500m" -> 1, "1Gi" -> 1073741824).
  int64_t value() const;
};

// nullopt when the text is not a quantity. Negative quantities parse (the caller
// decides whether they are allowed).
std::optional<Quantity> parseQuantity(const std::string& text);

}  // namespace rpcjob::api
