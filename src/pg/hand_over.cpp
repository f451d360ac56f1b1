#include "pg_prelude.hpp"

extern "C" {
#include "utils/array.h"
}

#include "hand_over.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "gucs.hpp"
#include "kept_statement.hpp"
#include "shared_memory.hpp"

namespace extsvc::pg {

namespace {

constexpr int kRingItems = 16;    // per worker: the head of a burst, not the whole burst
constexpr int kWorkBytes = 8000;  // a larger work document goes the way of a claim
constexpr int kMaxTxnIds = 64;    // creates of one transaction considered for a hand-over

// An item moves FREE -> RESERVED -> FILLED (the creating backend, before its commit record) ->
// READY (its commit) -> FREE (the worker took it); an abort, or a worker restarted meanwhile
// (another generation), sends it back to FREE from RESERVED or FILLED. Only the reserving
// backend moves an item out of RESERVED and FILLED, only the worker out of READY.
enum ItemState : uint32 { kItemFree = 0, kItemReserved = 1, kItemFilled = 2, kItemReady = 3 };

struct HandOverItem {
  pg_atomic_uint32 state;
  uint32 generation;
  int64 state_version;
  int32 work_len;
  TimestampTz leased_at;  // a moment before the lease was written
  char id[40];
  char token[40];
  char work[kWorkBytes];
};

struct HandOverRing {
  pg_atomic_uint32 accepting;   // 1 while the slot's worker takes hand-overs
  pg_atomic_uint32 generation;  // one per process of the slot
  pg_atomic_uint32 lease_s;
  pg_atomic_uint32 database;  // the worker's database: only its transactions hand over
  char worker_name[64];       // written before accepting is set
  HandOverItem items[kRingItems];
};

struct HandOverShared {
  pg_atomic_uint32 next;  // where the search for a worker starts (round robin)
  HandOverRing rings[kMaxWorkers];
};

HandOverShared* g_ho = nullptr;

// The current transaction's hand-over (a backend runs one transaction at a time).
bool g_ho_callback = false;
int g_ho_nids = 0;
pg_uuid_t g_ho_ids[kMaxTxnIds];
Oid g_ho_role = InvalidOid;
int g_ho_slot = -1;
uint32 g_ho_generation = 0;
int g_ho_nitems = 0;
int g_ho_items[kRingItems];

// Leases the listed CREATING services' rows to the worker and returns their work
// (sql/parts/76_worker_hand_over.sql).
Statement s_hand_over{
    "SELECT id, state_version::pg_catalog.text, lease_token::pg_catalog.text, work "
    "FROM extsvc._hand_over_creates($1, $2, $3, $4)",
    4,
    {TEXTOID, UUIDARRAYOID, INT4OID, INT4OID},
    nullptr};

void reset_txn() {
  g_ho_nids = 0;
  g_ho_role = InvalidOid;
  g_ho_slot = -1;
  g_ho_nitems = 0;
}

void free_items() {
  if (g_ho_slot < 0) return;
  HandOverRing& ring = g_ho->rings[g_ho_slot];
  for (int k = 0; k < g_ho_nitems; ++k)
    pg_atomic_write_u32(&ring.items[g_ho_items[k]].state, kItemFree);
  g_ho_nitems = 0;
}

// Reserves up to want free items of the slot's ring (g_ho_items); how many.
int reserve(int slot, int want) {
  HandOverRing& ring = g_ho->rings[slot];
  g_ho_slot = slot;
  g_ho_generation = pg_atomic_read_u32(&ring.generation);
  g_ho_nitems = 0;
  for (int i = 0; i < kRingItems && g_ho_nitems < want; ++i) {
    uint32 expected = kItemFree;
    if (pg_atomic_compare_exchange_u32(&ring.items[i].state, &expected, kItemReserved)) {
      ring.items[i].generation = g_ho_generation;
      g_ho_items[g_ho_nitems++] = i;
    }
  }
  if (g_ho_nitems == 0) g_ho_slot = -1;
  return g_ho_nitems;
}

// Reserves items in the ring of a worker that takes hand-overs: round robin, the watcher (slot 0
// with extsvc.watch on, busy with its caches) only when no other has room. False: none has.
bool reserve_in_some_ring(int want) {
  const uint32 start = pg_atomic_fetch_add_u32(&g_ho->next, 1);
  SharedState* st = shared_state();
  for (int pass = 0; pass < 2; ++pass)
    for (int k = 0; k < kMaxWorkers; ++k) {
      const int s = static_cast<int>((start + k) % kMaxWorkers);
      if ((pass == 0) == (s == 0 && gucs.watch)) continue;
      // a create in another database on this server (the extension installed there too) is not
      // the workers' to write: it is only woken for, as before
      if (pg_atomic_read_u32(&st->slots[s].pid) != 0 &&
          pg_atomic_read_u32(&g_ho->rings[s].accepting) != 0 &&
          pg_atomic_read_u32(&g_ho->rings[s].database) == MyDatabaseId && reserve(s, want) > 0)
        return true;
    }
  return false;
}

// Fills the reserved items from the last SPI result; an ERROR (a document that does not fit)
// rolls the leases back with the subtransaction.
void fill_items(HandOverRing& ring, int n, TimestampTz leased_at) {
  for (int r = 0; r < n; ++r) {
    HandOverItem& it = ring.items[g_ho_items[r]];
    const char* id = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
    const char* version = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2);
    const char* token = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 3);
    const char* work = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 4);
    if (id == nullptr || version == nullptr || token == nullptr || work == nullptr ||
        strlen(id) >= sizeof it.id || strlen(token) >= sizeof it.token ||
        strlen(work) >= static_cast<size_t>(kWorkBytes))
      elog(ERROR, "nico_extsvc: a hand-over row does not fit its slot");
    strlcpy(it.id, id, sizeof it.id);
    strlcpy(it.token, token, sizeof it.token);
    it.work_len = static_cast<int32>(strlen(work));
    memcpy(it.work, work, static_cast<size_t>(it.work_len) + 1);
    it.state_version = strtoll(version, nullptr, 10);
    it.leased_at = leased_at;
    pg_write_barrier();
    pg_atomic_write_u32(&it.state, kItemFilled);
  }
  // reserved beyond the rows leased: free again
  for (int k = n; k < g_ho_nitems; ++k)
    pg_atomic_write_u32(&ring.items[g_ho_items[k]].state, kItemFree);
  g_ho_nitems = n;
}

// Just before the commit record: lease what can be handed over, in a subtransaction so that a
// failure costs the hand-over only (the rows stay due and are claimed), never the commit.
void lease_at_pre_commit() {
  if (g_ho_nids == 0 || g_ho == nullptr || !gucs.hand_over || !OidIsValid(g_ho_role) ||
      IsolationIsSerializable())
    return;
  if (!reserve_in_some_ring(std::min(g_ho_nids, kRingItems))) return;
  HandOverRing& ring = g_ho->rings[g_ho_slot];
  pg_read_barrier();
  char worker[sizeof ring.worker_name];
  strlcpy(worker, ring.worker_name, sizeof worker);
  const int lease_s = static_cast<int>(pg_atomic_read_u32(&ring.lease_s));

  MemoryContext caller = CurrentMemoryContext;
  ResourceOwner owner = CurrentResourceOwner;
  BeginInternalSubTransaction(nullptr);
  PG_TRY();
  {
    Oid user = InvalidOid;
    int sec = 0;
    GetUserIdAndSecContext(&user, &sec);
    SetUserIdAndSecContext(g_ho_role,
                           sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "SPI_connect failed");
    PushActiveSnapshot(GetTransactionSnapshot());
    Datum* ids = static_cast<Datum*>(palloc(sizeof(Datum) * g_ho_nitems));
    for (int i = 0; i < g_ho_nitems && i < g_ho_nids; ++i) ids[i] = UUIDPGetDatum(&g_ho_ids[i]);
    const int nids = std::min(g_ho_nitems, g_ho_nids);
    ArrayType* arr = construct_array(ids, nids, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR);
    const TimestampTz leased_at = GetCurrentTimestamp();
    const Datum args[] = {CStringGetTextDatum(worker), PointerGetDatum(arr), Int32GetDatum(lease_s),
                          Int32GetDatum(kWorkBytes - 1)};
    const int n = run(s_hand_over, args);
    if (n > g_ho_nitems) elog(ERROR, "nico_extsvc: more rows handed over than reserved");
    fill_items(ring, n, leased_at);
    PopActiveSnapshot();
    SPI_finish();
    SetUserIdAndSecContext(user, sec);
    ReleaseCurrentSubTransaction();
  }
  PG_CATCH();
  {
    MemoryContextSwitchTo(caller);
    ErrorData* ed = CopyErrorData();
    FlushErrorState();
    RollbackAndReleaseCurrentSubTransaction();  // the leases with it; the role restored
    free_items();
    ereport(LOG, (errmsg("nico_extsvc: hand-over at commit skipped: %s", ed->message),
                  errdetail("The services' rows stay due and a worker claims them.")));
    FreeErrorData(ed);
  }
  PG_END_TRY();
  MemoryContextSwitchTo(caller);
  CurrentResourceOwner = owner;
}

void publish_at_commit() {
  if (g_ho_slot < 0 || g_ho_nitems == 0) return;
  HandOverRing& ring = g_ho->rings[g_ho_slot];
  const bool same = pg_atomic_read_u32(&ring.generation) == g_ho_generation;
  for (int k = 0; k < g_ho_nitems; ++k)
    pg_atomic_write_u32(&ring.items[g_ho_items[k]].state, same ? kItemReady : kItemFree);
  if (same) {
    SharedState* st = shared_state();
    // as a wake at commit: when the latch was set, for the worker's claim log (commit_burst.py)
    pg_atomic_write_u64(&st->wake_set_us, static_cast<uint64>(GetCurrentTimestamp()));
    Latch* latch = st->slots[g_ho_slot].latch;
    if (latch != nullptr) SetLatch(latch);
  }
  g_ho_nitems = 0;
}

void on_xact(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
      if (g_ho_nids == 0) break;
      lease_at_pre_commit();
      // Rows not handed over (no worker accepts, its ring is full, a failure, more creates than
      // fit) are claimed: every worker is woken at commit, as for any other intent. When all
      // were handed over, only their worker is (publish_at_commit), and the others, the watcher
      // above all, do not take CPU from it at the moment it has work.
      if (g_ho_nitems < g_ho_nids) wake_workers_at_commit();
      break;
    case XACT_EVENT_COMMIT:
      publish_at_commit();
      reset_txn();
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
    case XACT_EVENT_PREPARE:
      free_items();
      reset_txn();
      break;
    default:
      break;
  }
}

}  // namespace

Size hand_over_shmem_size() {
  return MAXALIGN(sizeof(HandOverShared));
}

void hand_over_attach_shmem() {
  bool found = false;
  g_ho = static_cast<HandOverShared*>(
      ShmemInitStruct("nico_extsvc hand-over", sizeof(HandOverShared), &found));
  if (found) return;
  pg_atomic_init_u32(&g_ho->next, 0);
  for (auto& r : g_ho->rings) {
    pg_atomic_init_u32(&r.accepting, 0);
    pg_atomic_init_u32(&r.generation, 0);
    pg_atomic_init_u32(&r.lease_s, 60);
    pg_atomic_init_u32(&r.database, InvalidOid);
    r.worker_name[0] = '\0';
    for (auto& it : r.items) pg_atomic_init_u32(&it.state, kItemFree);
  }
}

void hand_over_at_commit(const pg_uuid_t* service_id) {
  // without shared memory, or with the hand-over off, the workers are woken as after any intent
  if (g_ho == nullptr || !gucs.hand_over) {
    wake_workers_at_commit();
    return;
  }
  if (!g_ho_callback) {
    RegisterXactCallback(on_xact, nullptr);
    g_ho_callback = true;
  }
  g_ho_role = GetUserId();
  if (g_ho_nids < kMaxTxnIds) g_ho_ids[g_ho_nids++] = *service_id;
}

void hand_over_worker_start(int slot) {
  if (g_ho == nullptr) return;
  HandOverRing& ring = g_ho->rings[slot];
  pg_atomic_write_u32(&ring.accepting, 0);
  pg_atomic_fetch_add_u32(&ring.generation, 1);
  // what was published to the previous process is void: its leases are released next
  for (auto& it : ring.items) {
    uint32 expected = kItemReady;
    (void)pg_atomic_compare_exchange_u32(&it.state, &expected, kItemFree);
  }
}

void hand_over_accepting(int slot, bool on, int lease_s, const char* worker_name) {
  if (g_ho == nullptr) return;
  HandOverRing& ring = g_ho->rings[slot];
  if (!on) {
    pg_atomic_write_u32(&ring.accepting, 0);
    return;
  }
  // the slot's name never changes: written once, before the first time it accepts
  if (strcmp(ring.worker_name, worker_name) != 0) {
    strlcpy(ring.worker_name, worker_name, sizeof ring.worker_name);
    pg_write_barrier();
  }
  pg_atomic_write_u32(&ring.lease_s, static_cast<uint32>(std::max(lease_s, 1)));
  pg_atomic_write_u32(&ring.database, MyDatabaseId);
  pg_write_barrier();
  pg_atomic_write_u32(&ring.accepting, 1);
}

void hand_over_take(MemoryContext cxt, int slot, QueueBatch* out, TimestampTz* leased_at) {
  out->count = 0;
  out->items = nullptr;
  *leased_at = 0;
  if (g_ho == nullptr) return;
  HandOverRing& ring = g_ho->rings[slot];
  const uint32 generation = pg_atomic_read_u32(&ring.generation);
  int ready = 0;
  for (auto& it : ring.items) ready += pg_atomic_read_u32(&it.state) == kItemReady ? 1 : 0;
  if (ready == 0) return;
  auto* items =
      static_cast<QueueItem*>(MemoryContextAllocZero(cxt, sizeof(QueueItem) * (ready + 1)));
  int n = 0;
  for (auto& it : ring.items) {
    if (n == ready || pg_atomic_read_u32(&it.state) != kItemReady) continue;
    pg_read_barrier();
    if (it.generation == generation) {
      items[n].id = MemoryContextStrdup(cxt, it.id);
      items[n].state_version = it.state_version;
      items[n].lease_token = MemoryContextStrdup(cxt, it.token);
      items[n].work =
          static_cast<char*>(MemoryContextAlloc(cxt, static_cast<Size>(it.work_len) + 1));
      memcpy(items[n].work, it.work, static_cast<size_t>(it.work_len) + 1);
      if (*leased_at == 0 || it.leased_at < *leased_at) *leased_at = it.leased_at;
      ++n;
    }
    pg_memory_barrier();
    pg_atomic_write_u32(&it.state, kItemFree);
  }
  out->items = items;
  out->count = n;
}

}  // namespace extsvc::pg
