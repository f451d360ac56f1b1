// A worker's private memory after the work is done (issue 26, part 1): parsing a page of 500
// objects, a resync over 25,000 DPUs or a burst of watch events leaves freed memory scattered
// between what outlives it (the watch caches, PostgreSQL's caches), and glibc returns none of it
// on its own while a chunk in use sits above it. At 10,000 DPUs the watcher held 79 MiB of heap
// for 43 MiB in use.
#pragma once

namespace extsvc::pg {

// Called before the worker sleeps: at most every 10 s, when the heap holds at least 8 MiB that
// is free, gives its free pages back (malloc_trim). Cheap when there is nothing to give.
void give_back_free_heap();

}  // namespace extsvc::pg
