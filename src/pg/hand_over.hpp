// The hand-over at commit (issue 26, part 4): a transaction that creates services leases their
// work rows to a worker just before it commits and passes the leases with the rows' work in
// shared memory, so the worker sends the first request without a claim transaction of its own.
// The lease is written in the creating transaction (it commits with it or not at all); a
// hand-over the worker never takes (it died, it stopped writing) ends when the lease expires,
// and the row is claimed as any other (docs/worker.md, "Hand-over at commit").
#pragma once

#include "pg_prelude.hpp"

#include "queue_access.hpp"

namespace extsvc::pg {

// Shared memory of the hand-over rings (one per worker slot).
Size hand_over_shmem_size();
void hand_over_attach_shmem();

// --- the creating backend ---
// Asks for the service's work row to be handed over when the current transaction commits (and
// for the workers to be woken, as extsvc._wake()). The role running now (the extension's, inside
// the API's SECURITY DEFINER gates) is the one that leases the rows at commit.
void hand_over_at_commit(const pg_uuid_t* service_id);

// --- the worker of a slot ---
// At the start of the slot's process, before its previous process's leases are released: the
// ring's hand-overs of that process are void from now on.
void hand_over_worker_start(int slot);
// Whether NICo's transactions may hand over to this worker now (it may write and waits for work;
// not while an iteration runs), and the lease they give it.
void hand_over_accepting(int slot, bool on, int lease_s, const char* worker_name);
// The hand-overs published to this slot, as claimed rows in cxt (out->count 0: none);
// *leased_at: the earliest lease's start (GetCurrentTimestamp clock).
void hand_over_take(MemoryContext cxt, int slot, QueueBatch* out, TimestampTz* leased_at);

}  // namespace extsvc::pg
