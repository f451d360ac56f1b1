#include "core/validation_error.hpp"

#include <utility>

namespace extsvc::core {

ValidationError::ValidationError(ErrorClass c, std::string p, std::string message, std::string h)
    : std::runtime_error(std::move(message)), cls(c), path(std::move(p)), hint(std::move(h)) {}

const char* sqlstate(ErrorClass cls) {
  switch (cls) {
    case ErrorClass::kNotJson:
      return "22P02";
    case ErrorClass::kInvalidField:
      return "22023";
    case ErrorClass::kUnsupported:
      return "0A000";
  }
  return "22023";
}

}  // namespace extsvc::core
