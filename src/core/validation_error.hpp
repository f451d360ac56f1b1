#pragma once

#include <stdexcept>
#include <string>

namespace extsvc::core {

// Each class maps to one SQLSTATE so the SQL layer needs no message parsing.
enum class ErrorClass {
  kNotJson,       // 22P02
  kInvalidField,  // 22023
  kUnsupported,   // 0A000
};

// A refusal of tenant input. `what()` is the one-line message; it never
// echoes values, so secrets pasted into the wrong field cannot leak into logs.
struct ValidationError : std::runtime_error {
  ErrorClass cls;
  std::string path;  // JSON path of the offending field, "$" for the root
  std::string hint;  // one sentence telling the caller what to do

  ValidationError(ErrorClass cls, std::string path, std::string message, std::string hint);
};

// SQLSTATE text for the class, e.g. "22023".
const char* sqlstate(ErrorClass cls);

}  // namespace extsvc::core
