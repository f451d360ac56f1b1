// Helpers shared by the libFuzzer targets of nico_extsvc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace extsvc::fuzz {

// A property violation: print where and abort, so libFuzzer records a crash
// and saves the input (sanitizer reports are handled by the runtime itself).
[[noreturn]] inline void fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "FUZZ CHECK FAILED %s:%d: %s\n", file, line, what);
  std::abort();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace extsvc::fuzz

#define FUZZ_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::extsvc::fuzz::fail(__FILE__, __LINE__, #cond))
