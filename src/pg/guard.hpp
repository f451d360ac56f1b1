// The C++/PostgreSQL boundary.
//
// PostgreSQL reports errors with longjmp; C++ unwinds with exceptions. Neither
// may cross the other's frames: a longjmp over a C++ frame skips destructors,
// an exception through a PostgreSQL frame is undefined behaviour. The one rule:
//
//   C++ runs only inside cpp_call(). Inside it nothing may raise a PostgreSQL
//   error: results leave through copy_out() (an allocation that reports
//   failure as std::bad_alloc instead of ereport), errors leave as plain data
//   in a PendingError (fixed buffers, no allocation), and raise_if() turns
//   them into an ereport once every C++ object of the scope is gone.
//
// SQL-callable C functions are declared with EXTSVC_SQL_FUNCTION, which runs
// the three stages in that order: read the arguments (PostgreSQL only, into
// trivially destructible values), compute (C++ only, guarded), emit the
// result (PostgreSQL only).
#pragma once

#include "pg_prelude.hpp"

#include <cstdio>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/validation_error.hpp"

namespace extsvc::pg {

// Trivially destructible, allocation-free: safe to keep in scope across ereport.
struct PendingError {
  int sqlstate = 0;
  char message[1024] = {0};
  char detail[1024] = {0};
  char hint[512] = {0};
};
static_assert(std::is_trivially_destructible_v<PendingError>);

inline int sqlstate_for(core::ErrorClass cls) {
  switch (cls) {
    case core::ErrorClass::kNotJson:
      return ERRCODE_INVALID_TEXT_REPRESENTATION;  // 22P02
    case core::ErrorClass::kUnsupported:
      return ERRCODE_FEATURE_NOT_SUPPORTED;  // 0A000
    case core::ErrorClass::kInvalidField:
    default:
      return ERRCODE_INVALID_PARAMETER_VALUE;  // 22023
  }
}

// Copies s into memory of cxt without raising a PostgreSQL error: for use
// inside cpp_call(). Out of memory becomes std::bad_alloc.
inline char* copy_out(MemoryContext cxt, std::string_view s) {
  if (s.size() >= MaxAllocSize) throw std::length_error("result larger than 1 GB");
  auto* p = static_cast<char*>(MemoryContextAllocExtended(cxt, s.size() + 1, MCXT_ALLOC_NO_OOM));
  if (p == nullptr) throw std::bad_alloc();
  if (!s.empty()) memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

// Zeroed memory of cxt for an array of n T, without raising (see copy_out).
template <class T>
T* alloc_out(MemoryContext cxt, size_t n) {
  if (n >= MaxAllocSize / sizeof(T)) throw std::length_error("array larger than 1 GB");
  void* p = MemoryContextAllocExtended(cxt, n * sizeof(T), MCXT_ALLOC_NO_OOM | MCXT_ALLOC_ZERO);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<T*>(p);
}

// Runs f, converting any C++ exception into `err`. f must not call PostgreSQL
// functions that can raise an ERROR (copy_out() is the allowed way out).
template <class F>
void cpp_call(PendingError& err, F&& f) noexcept {
  try {
    f();
  } catch (const core::ValidationError& e) {
    err.sqlstate = sqlstate_for(e.cls);
    snprintf(err.message, sizeof err.message, "%s", e.what());
    snprintf(err.detail, sizeof err.detail, "JSON path: %s", e.path.c_str());
    snprintf(err.hint, sizeof err.hint, "%s", e.hint.c_str());
  } catch (const std::bad_alloc&) {
    err.sqlstate = ERRCODE_OUT_OF_MEMORY;
    snprintf(err.message, sizeof err.message, "out of memory in nico_extsvc");
  } catch (const std::exception& e) {
    err.sqlstate = ERRCODE_INTERNAL_ERROR;
    snprintf(err.message, sizeof err.message, "nico_extsvc internal error: %s", e.what());
  } catch (...) {
    err.sqlstate = ERRCODE_INTERNAL_ERROR;
    snprintf(err.message, sizeof err.message, "nico_extsvc internal error: unknown exception");
  }
}

// Raises the pending error, if any. Call with no live C++ objects in scope.
inline void raise_if(const PendingError& err) {
  if (err.sqlstate == 0) return;
  ereport(ERROR, (errcode(err.sqlstate), errmsg_internal("%s", err.message),
                  err.detail[0] ? errdetail_internal("%s", err.detail) : 0,
                  err.hint[0] ? errhint("%s", err.hint) : 0));
}

// The guarded compute stage of a SQL-callable function: runs compute(in) in
// cpp_call() and copies a string result out with copy_out(). A result of
// std::nullopt gives nullptr (SQL NULL); a bool result is returned as is.
template <class In, class Compute>
auto guarded_compute(const In& in, Compute&& compute) {
  using R = std::invoke_result_t<Compute&, const In&>;
  PendingError err;
  if constexpr (std::is_same_v<R, bool>) {
    bool out = false;
    cpp_call(err, [&] { out = compute(in); });
    raise_if(err);
    return out;
  } else {
    char* out = nullptr;
    cpp_call(err, [&] {
      R r = compute(in);
      if constexpr (std::is_same_v<R, std::string>) {
        out = copy_out(CurrentMemoryContext, r);
      } else {
        static_assert(std::is_same_v<R, std::optional<std::string>>,
                      "compute returns bool, std::string or std::optional<std::string>");
        if (r) out = copy_out(CurrentMemoryContext, *r);
      }
    });
    raise_if(err);
    return out;
  }
}

template <class Read, class Compute, class Emit>
Datum sql_function(FunctionCallInfo fcinfo, Read&& read, Compute&& compute, Emit&& emit) {
  const auto in = read(fcinfo);
  static_assert(std::is_trivially_destructible_v<std::remove_const_t<decltype(in)>>,
                "arguments must stay valid across ereport: use views and fixed buffers");
  auto out = guarded_compute(in, compute);
  return emit(fcinfo, out);
}

}  // namespace extsvc::pg

// Declares the SQL-callable C function `name` (AS 'MODULE_PATHNAME', 'name')
// as the three guarded stages, given after the name (variadic only because
// lambdas contain commas): read(fcinfo) -> In, compute(const In&) -> bool |
// std::string | std::optional<std::string>, emit(fcinfo, bool | char*) -> Datum.
#define EXTSVC_SQL_FUNCTION(name, ...)                      \
  extern "C" {                                              \
  PG_FUNCTION_INFO_V1(name);                                \
  Datum name(PG_FUNCTION_ARGS) {                            \
    return ::extsvc::pg::sql_function(fcinfo, __VA_ARGS__); \
  }                                                         \
  }
