#pragma once

#include <string_view>

namespace extsvc::core {

// Kubernetes resource.Quantity string grammar (apimachinery ParseQuantity):
//   quantity ::= [sign] number suffix
//   number   ::= digits | digits "." [digits] | "." digits
//   suffix   ::= "" | binarySI (Ki Mi Gi Ti Pi Ei)
//              | decimalSI (n u m k M G T P E)
//              | ("e" | "E") [sign] digits
// Negative quantities are refused: no resource request can be below zero.
bool is_nonnegative_quantity(std::string_view s);

}  // namespace extsvc::core
