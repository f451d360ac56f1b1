// The C++/PostgreSQL boundary.
//
// PostgreSQL reports errors with longjmp; C++ unwinds with exceptions. Neither
// may cross the other's frames: a longjmp over a C++ frame skips destructors,
// an exception through a PostgreSQL frame is undefined behaviour. So C++ code
// runs inside cpp_call(), which turns any exception into plain data, and the
// PostgreSQL error is raised only after every C++ object of that scope is gone.
#pragma once

#include "pg_prelude.hpp"

#include <exception>
#include <string>

#include "core/validation_error.hpp"

namespace extsvc::pg {

struct PendingError {
  int sqlstate = 0;
  char* message = nullptr;  // palloc'd
  char* detail = nullptr;
  char* hint = nullptr;
};

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

// Runs f, converting any C++ exception into `err`. f must not call PostgreSQL
// functions that can raise an ERROR.
template <class F>
void cpp_call(PendingError& err, F&& f) noexcept {
  try {
    f();
  } catch (const core::ValidationError& e) {
    err.sqlstate = sqlstate_for(e.cls);
    err.message = pstrdup(e.what());
    err.detail = psprintf("JSON path: %s", e.path.c_str());
    err.hint = e.hint.empty() ? nullptr : pstrdup(e.hint.c_str());
  } catch (const std::bad_alloc&) {
    err.sqlstate = ERRCODE_OUT_OF_MEMORY;
    err.message = pstrdup("out of memory in nico_extsvc");
  } catch (const std::exception& e) {
    err.sqlstate = ERRCODE_INTERNAL_ERROR;
    err.message = psprintf("nico_extsvc internal error: %s", e.what());
  } catch (...) {
    err.sqlstate = ERRCODE_INTERNAL_ERROR;
    err.message = pstrdup("nico_extsvc internal error: unknown exception");
  }
}

// Raises the pending error, if any. Call with no live C++ objects in scope.
inline void raise_if(const PendingError& err) {
  if (err.sqlstate == 0) return;
  ereport(ERROR, (errcode(err.sqlstate), errmsg_internal("%s", err.message),
                  err.detail ? errdetail_internal("%s", err.detail) : 0,
                  err.hint ? errhint("%s", err.hint) : 0));
}

}  // namespace extsvc::pg
