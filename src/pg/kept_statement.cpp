#include "pg_prelude.hpp"

#include "kept_statement.hpp"

namespace extsvc::pg {

int run(Statement& st, const Datum* values, const char* nulls) {
  if (st.plan == nullptr) {
    SPIPlanPtr plan = SPI_prepare(st.sql, st.nargs, st.types);
    if (plan == nullptr)
      elog(ERROR, "nico_extsvc: preparing \"%s\" failed: %s", st.sql,
           SPI_result_code_string(SPI_result));
    if (SPI_keepplan(plan) != 0)
      elog(ERROR, "nico_extsvc: keeping the plan of \"%s\" failed", st.sql);
    st.plan = plan;
  }
  const int rc = SPI_execute_plan(st.plan, const_cast<Datum*>(values), nulls, false, 0);
  if (rc != SPI_OK_SELECT)
    elog(ERROR, "nico_extsvc: \"%s\" failed: %s", st.sql, SPI_result_code_string(rc));
  return static_cast<int>(SPI_processed);
}

char* text_col(MemoryContext cxt, int row, int col) {
  char* v = SPI_getvalue(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col);
  return v ? MemoryContextStrdup(cxt, v) : nullptr;
}

char** text_rows(MemoryContext cxt, int n, int col) {
  auto** out = static_cast<char**>(MemoryContextAllocZero(cxt, sizeof(char*) * (n + 1)));
  for (int i = 0; i < n; ++i) out[i] = text_col(cxt, i, col);
  return out;
}

}  // namespace extsvc::pg
