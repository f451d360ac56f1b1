// Conversions between PostgreSQL datums and plain C++ values. These call
// PostgreSQL functions that may raise, so use them outside cpp_call().
#pragma once

#include "pg_prelude.hpp"

#include <string>
#include <string_view>

namespace extsvc::pg {

inline std::string_view text_view(const text* t) {
  return {VARDATA_ANY(t), static_cast<size_t>(VARSIZE_ANY_EXHDR(t))};
}

// A canonical UUID as a trivially destructible value, so that it can stay in
// scope when PostgreSQL raises an error (longjmp skips destructors).
struct UuidText {
  char buf[37];
  std::string_view view() const { return {buf, 36}; }
};

inline UuidText uuid_to_string(const pg_uuid_t* u) {
  static const char* hex = "0123456789abcdef";
  UuidText t{};
  int o = 0;
  for (int i = 0; i < UUID_LEN; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) t.buf[o++] = '-';
    t.buf[o++] = hex[u->data[i] >> 4];
    t.buf[o++] = hex[u->data[i] & 0xF];
  }
  t.buf[36] = '\0';
  return t;
}

inline char* jsonb_to_cstring(Jsonb* j) {
  return JsonbToCString(nullptr, &j->root, static_cast<int>(VARSIZE(j)));
}

inline Datum jsonb_from_cstring(const char* s) {
  return DirectFunctionCall1(jsonb_in, CStringGetDatum(s));
}

}  // namespace extsvc::pg
