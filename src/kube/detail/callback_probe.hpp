// libcurl calls back into C++ from its C frames; a C++ exception must never unwind through them
// (libcurl's state would be left half-updated). Every callback of this library catches
// everything. The probe lets the tests throw inside a callback (an allocation failure, say) and
// check that; it is nullptr in the product.
#pragma once

namespace extsvc::kube::detail {

using CallbackProbe = void (*)(const char* callback);
extern CallbackProbe callback_probe;

inline void probe(const char* callback) {
  if (callback_probe != nullptr) callback_probe(callback);
}

}  // namespace extsvc::kube::detail
