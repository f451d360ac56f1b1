// spdlog output of the worker, routed into the server log. Messages are
// buffered by the sink (C++ side) and emitted with ereport by flush_logs()
// from a PostgreSQL frame, so an error inside elog can never unwind C++.
// Every line passes through kube::redact first.
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

// Installs the buffering sink as spdlog's default logger (idempotent).
void install_log_sink(const char* worker_name);
void set_log_level(int spdlog_level);
// Emits and clears the buffered lines. Call outside any C++ try scope.
void flush_logs();

}  // namespace extsvc::pg
