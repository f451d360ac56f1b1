// The worker's and the lease process's SQL statements: each prepared at its
// first use and kept for the process (SPI_keepplan), as they run the same few
// statements forever. The plan cache re-plans a kept plan when what it calls
// changes (ALTER EXTENSION UPDATE). Callers are inside a transaction with SPI
// connected (queue_access.cpp, site_access.cpp).
#pragma once

#include "pg_prelude.hpp"

namespace extsvc::pg {

struct Statement {
  const char* sql;
  int nargs;
  Oid types[6];
  SPIPlanPtr plan;
};

// Runs st with the arguments (a null pointer in nulls means none is NULL);
// returns the number of rows. A failure is an ERROR naming the statement.
int run(Statement& st, const Datum* values = nullptr, const char* nulls = nullptr);

// Text form of a column of the last result (uuid, jsonb and text through
// their output functions), copied into cxt; NULL stays NULL.
char* text_col(MemoryContext cxt, int row, int col);

// Column col of the last result's first n rows, as text_col gives them, in a
// NULL-terminated array in cxt.
char** text_rows(MemoryContext cxt, int n, int col);

}  // namespace extsvc::pg
