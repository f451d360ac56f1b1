#include "heap_trim.hpp"

#include <malloc.h>

#include <chrono>
#include <cstddef>

namespace extsvc::pg {

namespace {

constexpr auto kEvery = std::chrono::seconds(10);
constexpr size_t kWorthIt = size_t{8} << 20;

std::chrono::steady_clock::time_point g_last_look{};

}  // namespace

void give_back_free_heap() {
  const auto now = std::chrono::steady_clock::now();
  if (now - g_last_look < kEvery) return;
  g_last_look = now;
  // mallinfo2 walks the free lists: milliseconds at most, and only every kEvery
  const struct mallinfo2 mi = mallinfo2();
  if (mi.fordblks < kWorthIt) return;
  malloc_trim(0);
}

}  // namespace extsvc::pg
