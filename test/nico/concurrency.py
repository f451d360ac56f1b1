#!/usr/bin/python3
"""NICo's handler transactions, two at a time, checked against a serial order (issue 22, part 5).

NICo makes several SQL API calls in one transaction per handler (a batch
allocation: upsert each instance, then set each one's services; a config
update: read, compare-and-swap, read back; a release; a credential rotation;
a delete of versions ...), and many handlers run at once. This runs pairs of
such transactions concurrently, in two sessions of NICo's typed client
(test/nico/sqlx_pg.py: binds like sqlx, an extsvc_api-only role, NICo
MachineIds), with short random pauses between the calls so that they
interleave at every step, plus the worker's side (a faithful DPU pass, a
service transition) played through its entry points by a superuser session.

Every pair is checked against the reference model (test/nico/conc_model.py,
test/model/model_sql.py's model of the SQL contract extended to KUBERNETES_POD
services), started from the state the previous pairs left:
- no transaction may end in 40P01 (deadlock) or in an error no serial
  order explains;
- both committed: the answers of every call of both and the whole
  observable state afterwards (SNAPSHOT_SQL) must equal those of running A
  then B, or B then A, each as one atomic transaction;
- one committed: its answers and the state must be those of running it
  alone; the other's error must be the one the model gives it before the
  committed one, after it, or with its calls up to some point before it and
  the rest after it (READ COMMITTED: each statement sees what committed
  before it; a compare-and-swap that read an older config version is such
  an error, and the handler's own);
- both failed: nothing changed, and each error is explained the same way.
Closing line: `concurrency: N pairs, ..., N failed` (exit 1 on any failure).

  /usr/bin/python3 test/nico/concurrency.py --pairs 1000 --seed 1
Connection: libpq's PG* variables (a superuser). Creates and drops the
database extsvc_conc and the role extsvc_conc_api.
"""
import argparse
import collections
import copy
import json
import os
import random
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

import psycopg  # noqa: E402

import nico_db as db  # noqa: E402
import sqlx_pg  # noqa: E402
from conc_gen import DPUS, HOST_OF, Gen  # noqa: E402
from conc_model import NicoModel, SNAPSHOT_SQL  # noqa: E402
from model_sql import diff_states  # noqa: E402
from reference_model import VARIANTS, Refused  # noqa: E402

DB = "extsvc_conc"
ROLE = "extsvc_conc_api"

SETUP_SQL = r"""
CREATE SCHEMA conc;
-- The worker's service pass, as the worker makes it: the claim (a lease on
-- a due, unleased row, as extsvc.claim stamps it) committed before the pair
-- starts, then, in the pair, the completion through extsvc.complete with the
-- claimed state_version and lease token.
CREATE FUNCTION conc.w_claim(p_sid uuid) RETURNS TABLE (state_version bigint, lease_token uuid)
LANGUAGE sql AS $f$
  UPDATE extsvc.dpf_extension_service_reconciliations
     SET lease_owner = 'conc', lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute'
   WHERE service_id = p_sid AND next_due_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())
  RETURNING state_version, lease_token
$f$;
CREATE FUNCTION conc.w_release(p_sid uuid) RETURNS void LANGUAGE sql AS $f$
  UPDATE extsvc.dpf_extension_service_reconciliations
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
   WHERE service_id = p_sid AND lease_owner = 'conc'
$f$;
CREATE FUNCTION conc.w_transition(p_sid uuid, p_sv bigint, p_token uuid, p_state text, p_reason text)
RETURNS text LANGUAGE sql AS $f$
  SELECT extsvc.complete('service', p_sid::text, p_sv, p_token,
                         jsonb_strip_nulls(jsonb_build_object('outcome', 'transition', 'new_state', p_state,
                           'reason', p_reason, 'message', 'played by concurrency.py',
                           'applied_revision', CASE WHEN p_state = 'READY'
                             THEN (SELECT desired_revision FROM extsvc.service_records WHERE service_id = p_sid) END)))
$f$;
-- a faithful DPU pass: the DPU's work row leased (its lock, first), its work
-- read, every item reported as a correct pass would (wanted RUNNING, the
-- rest TERMINATED), through extsvc.complete
CREATE FUNCTION conc.w_pass(p_dpu text) RETURNS text LANGUAGE plpgsql AS $f$
DECLARE
  sv bigint; tok uuid := gen_random_uuid(); w jsonb;
BEGIN
  UPDATE extsvc.dpu_reconciliations
     SET lease_owner = 'conc', lease_token = tok, lease_expires_at = now() + interval '1 minute'
   WHERE dpu_machine_id = p_dpu RETURNING state_version INTO sv;
  w := extsvc._dpu_work(p_dpu, 0);
  RETURN extsvc.complete('dpu', p_dpu, sv, tok, jsonb_build_object('outcome', 'observed', 'results', coalesce((
    SELECT jsonb_agg(jsonb_build_object('kind', 'attachment', 'instance_id', i->'instance_id',
             'service_id', i->'service_id', 'version', i->'version', 'message', 'played by concurrency.py',
             'state', CASE WHEN (i->>'wanted')::boolean THEN 'RUNNING' ELSE 'TERMINATED' END))
      FROM jsonb_array_elements(w->'items') i WHERE i->>'kind' = 'attachment'), '[]')));
END
$f$;
"""


# --- running a transaction for real ---------------------------------------------------------

def entry_json(entries):
    return [{"service_id": s, "version": v, "removed": None} for s, v in entries]


def row_of(row):
    return {"state": row["lifecycle_state"], "ctr": row["version_ctr"], "desired": row["desired_revision"],
            "applied": row["applied_revision"], "name": row["service_name"], "target": row["dpu_target"]}


def run_op(api, su, op, answers):
    """One call as NICo (or the worker) makes it; the answer in the model's terms."""
    k, a = op["op"], op["args"]
    if k == "create":
        row = db.create(api, uuid.UUID(a["sid"]), "dpf_helm_chart", a["name"], a["tenant"], None,
                        VARIANTS[a["data"]], a["target"].lower())
        return row_of(row), row["version"]
    if k == "create_kp":
        row = db.create(api, uuid.UUID(a["sid"]), "kubernetes_pod", a["name"], a["tenant"], None, a["data"],
                        has_credential=a["cred"])
        return (row["lifecycle_state"], row["version_ctr"]), row["version"]
    if k == "update":
        row = db.update(api, uuid.UUID(a["sid"]), VARIANTS[a["data"]], None, None, a["ctr"], None, None, a["tenant"])
        return row_of(row), row["version"]
    if k == "rotate_kp":
        row = db.update(api, uuid.UUID(a["sid"]), a["data"], None, None, a["ctr"], True, None, a["tenant"])
        return (row["lifecycle_state"], row["version_ctr"]), row["version"]
    if k == "delete":
        row = db.soft_delete_service(api, uuid.UUID(a["sid"]), a["tenant"])
        if row["service_type"] == "KUBERNETES_POD":
            return (row["lifecycle_state"], [(x["version_number"], x["had_credential"]) for x in row["removed_versions"]]), None
        return row_of(row), row["version"]
    if k == "delete_kp":
        rows = db.soft_delete_versions(api, uuid.UUID(a["sid"]), a["versions"], a["tenant"])
        return [(x["version_number"], x["had_credential"]) for x in rows], None
    if k == "lock_placement":
        db.lock_placement(api, a["hosts"], [uuid.UUID(i) for i in a["iids"]], [uuid.UUID(x) for x in a["sids"]],
                          a["tenant"])
        return None, None
    if k == "upsert_instance":
        db.upsert_instance(api, uuid.UUID(a["iid"]), a["tenant"], a["host"], a["net"], a["dpf"])
        return None, None
    if k == "set_services":
        cv = a["cv"]
        if cv == "read":
            cv = next(x[1][0] for x in reversed(answers) if x[0] == "ok" and isinstance(x[1], tuple) and len(x[1]) == 2
                      and isinstance(x[1][1], list))
        return db.update_extension_services_config(api, uuid.UUID(a["iid"]), entry_json(a["entries"]), cv,
                                                   a["tenant"])["config_version"], None
    if k == "read_instance":
        i = db.find_by_id(api, uuid.UUID(a["iid"]), a["tenant"])
        return (i["config_version"], sorted((e["service_id"], e["version"], e["removed_at"] is not None)
                                            for e in i["services"])), None
    if k == "delete_instance":
        db.mark_as_deleted(api, uuid.UUID(a["iid"]), a["tenant"])
        return None, None
    if k == "remove_terminated":
        return db.remove_terminated_services(api, uuid.UUID(a["iid"]), entry_json(a["entries"]), a["tenant"]), None
    if k in ("w_ready", "w_deleted"):
        if a["claimed"] is None:
            return "not due", None
        return sqlx_pg.scalar(su, "SELECT conc.w_transition(%s, %s, %s, %s, %s) AS v",
                              [("Uuid", a["sid"]), ("i64", a["claimed"]), ("Uuid", a["token"]),
                               ("String", a["state"]), ("String", a["reason"])], "String"), None
    if k == "w_pass":
        return sqlx_pg.scalar(su, "SELECT conc.w_pass(%s) AS v", [("String", a["dpu"])], "String"), None
    raise ValueError(k)


def run_txn(api, su, ops, rng, out):
    """The handler's transaction: BEGIN, the calls with short pauses, COMMIT;
    an error rolls everything back. out: answers, learnt strings, deadlock."""
    conn = su if any(op.get("worker") for op in ops) else api
    answers, learnt, trace = [], [], []
    try:
        with conn.transaction():
            for op in ops:
                time.sleep(rng.random() * 0.003)
                t = time.monotonic()
                value, version = run_op(api if conn is api else su, su, op, answers)
                trace.append((op["op"], t, time.monotonic()))
                answers.append(("ok", value))
                learnt.append(version)
                time.sleep(rng.random() * 0.002)
    except sqlx_pg.DbError as e:
        answers.append(("error", e.sqlstate, e.constraint))
        # a deadlock's DETAIL is its lock graph (which process waited for
        # which lock, held by whom); the failure report prints it
        if e.sqlstate == "40P01":
            out["deadlock"] = f"{e.detail or ''}\n{e.context or ''}".strip()
    out.update(answers=answers, learnt=learnt, trace=trace, commit=time.monotonic())


# --- checking -------------------------------------------------------------------------------

def normalize(answers):
    out = []
    for a in answers:
        if a[0] == "ok" and isinstance(a[1], tuple) and len(a[1]) == 2 and isinstance(a[1][1], list):
            a = ("ok", (a[1][0], sorted(tuple(x) if isinstance(x, list) else x for x in a[1][1])))
        out.append(a)
    return out


def learn(m, ops, real):
    """Version strings the database minted (V<n>-T<micros>) into the model."""
    for op, (ans, version) in zip(ops, zip(real["answers"], real["learnt"])):
        if ans[0] != "ok" or version is None:
            continue
        a = op["args"]
        if op["op"] in ("create", "update", "delete") and a["sid"] in m.services and m.services[a["sid"]]["version"] is None:
            m.services[a["sid"]]["version"] = version
        elif op["op"] in ("create_kp", "rotate_kp") and a["sid"] in m.kp:
            s = m.kp[a["sid"]]
            if s["versions"][s["ctr"]]["v"] is None:
                s["versions"][s["ctr"]]["v"] = version


def replay(m, ops, partner=None, split=None):
    """ops applied to a copy of m as one transaction: (answers, model after,
    or m when an op was refused). A set_services whose cv is "read" uses the
    config version the transaction's last read returned. With a partner
    (ops, real answers) and split j, the partner's committed transaction
    comes between op j - 1 and op j (what a READ COMMITTED statement of a
    transaction sees of a commit made while it ran)."""
    trial = copy.deepcopy(m)
    trial.txn_new = set()
    answers, read_cv = [], None
    for j, op in enumerate(ops):
        if partner is not None and j == split:
            _, trial2 = replay(trial, partner[0])
            learn(trial2, partner[0], partner[1])
            trial2.txn_new = trial.txn_new
            trial = trial2
        args = dict(op["args"])
        if args.get("cv") == "read":
            args["cv"] = read_cv
        trial.actor = "api"
        try:
            v = getattr(trial, op["op"])(args)
        except Refused as r:
            answers.append(("error", r.state, r.constraint))
            return answers, m
        if op["op"] == "read_instance":
            read_cv = v[0]
        answers.append(("ok", v))
    trial.txn_new = set()
    return answers, trial


def same(model_answers, real_answers):
    return normalize(model_answers) == normalize(real_answers)


def explain_failure(m, ops, real, partner=None):
    """Whether a failed transaction's answers (its error included) come out
    of the model: alone on m, after the partner, or split around it."""
    if same(replay(m, ops)[0], real["answers"]):
        return "alone"
    if partner is None:
        return None
    _, mp = replay(m, partner[0])
    learn(mp, partner[0], partner[1])
    if same(replay(mp, ops)[0], real["answers"]):
        return "after"
    for j in range(1, len(ops)):
        if same(replay(m, ops, partner, j)[0], real["answers"]):
            return f"split@{j}"
    return None


def both_how(names):
    """The outcome label of a pair both of whose transactions committed, from
    the candidate orders (first preferred) that explain it."""
    serial = [n for n in names if "," in n]
    if "A,B" in serial and "B,A" in serial:
        return "both committed: either order"
    if serial:
        return "both committed: only " + serial[0]
    return "both committed: reads first, writes serial: " + names[0]


def check_pair(m, a_ops, b_ops, ra, rb):
    """(verdict, model after, how) for one pair; verdict None when it passed."""
    a_ok = ra["answers"][-1][0] == "ok" if ra["answers"] else True
    b_ok = rb["answers"][-1][0] == "ok" if rb["answers"] else True
    for r in (ra, rb):
        if r["answers"] and r["answers"][-1][:2] == ("error", "40P01"):
            return "deadlock (40P01)", m, None
    if a_ok and b_ok:
        found = []
        for name, first, rf, second, rs in (("A,B", a_ops, ra, b_ops, rb), ("B,A", b_ops, rb, a_ops, ra)):
            ans1, m1 = replay(m, first)
            if not same(ans1, rf["answers"]):
                continue
            learn(m1, first, rf)
            ans2, m2 = replay(m1, second)
            if same(ans2, rs["answers"]):
                learn(m2, second, rs)
                found.append((name, m2))
        # READ COMMITTED: a plain read (get_instance, no lock) at the start
        # of a transaction may have seen the state from before the partner's
        # commit while all of its writes come after it. The writes are serial
        # (partner, then these); only those reads saw the earlier state.
        # NICo's own handler reads this way and guards its write with the
        # config version it read. These candidates come after the serial
        # orders: the state decides (a read may answer alike either way).
        for name, t_ops, rt, p_ops, rp in (("B", a_ops, ra, b_ops, rb), ("A", b_ops, rb, a_ops, ra)):
            ans_p, _ = replay(m, p_ops)
            if not same(ans_p, rp["answers"]):
                continue
            for j in range(1, len(t_ops)):
                if any(op["op"] != "read_instance" for op in t_ops[:j]):
                    break
                ans_t, mt = replay(m, t_ops, (p_ops, rp), j)
                if same(ans_t, rt["answers"]):
                    learn(mt, t_ops, rt)
                    found.append((f"{name}, then the other's writes (its first {j} read(s) before)", mt))
                    break
        if not found:
            return "answers of no serial order (A,B or B,A)", m, None
        # the state decides between candidates that answer alike
        return None, found, both_how([n for n, _ in found])
    if a_ok or b_ok:
        ops_ok, r_ok, ops_bad, r_bad = (a_ops, ra, b_ops, rb) if a_ok else (b_ops, rb, a_ops, ra)
        ans, m1 = replay(m, ops_ok)
        if not same(ans, r_ok["answers"]):
            return "the committed transaction's answers are not its serial ones", m, None
        learn(m1, ops_ok, r_ok)
        how = explain_failure(m, ops_bad, r_bad, (ops_ok, r_ok))
        if how is None:
            return f"an error no serial order gives: {r_bad['answers'][-1]}", m1, None
        return None, m1, "one failed " + how
    for ops, r in ((a_ops, ra), (b_ops, rb)):
        if explain_failure(m, ops, r) is None:
            return f"an error no serial order gives: {r['answers'][-1]}", m, None
    return None, m, "both failed"


def touched(m, ops):
    """The instances, services and DPUs a transaction names (and the DPUs of its instances' hosts)."""
    ids = set()
    for op in ops:
        for k in ("iid", "sid", "dpu"):
            if k in op["args"]:
                ids.add(op["args"][k])
        for e in op["args"].get("entries") or []:
            ids.add(e[0])
        if "iid" in op["args"]:
            ids.update(DPUS.get(HOST_OF[op["args"]["iid"]], []))
    return ids


def overlap(ra, rb):
    return int(ra["t0"] < rb["t1"] and rb["t0"] < ra["t1"])


def describe(ops):
    return "; ".join(f"{op['op']}({', '.join(f'{k}={v}' for k, v in op['args'].items() if k != 'data')})" for op in ops)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check-every", type=int, default=1, help="compare the whole state every N pairs")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--keep", action="store_true", help=f"keep the database {DB} afterwards (to study a failure)")
    args = ap.parse_args()
    rng = random.Random(args.seed)

    su0 = psycopg.connect(dbname="postgres", autocommit=True)
    su0.execute(f"DROP DATABASE IF EXISTS {DB}")
    su0.execute(f"DROP ROLE IF EXISTS {ROLE}")
    su0.execute(f"CREATE DATABASE {DB}")
    conns, failures, stats = [], 0, collections.Counter()
    errors, kinds = collections.Counter(), collections.Counter()
    t0 = time.time()
    try:
        su0.execute(f"ALTER DATABASE {DB} SET extsvc.enforce_chart_allowlist = off")
        setup = psycopg.connect(dbname=DB, autocommit=True)
        conns.append(setup)
        setup.execute("CREATE EXTENSION nico_extsvc")
        setup.execute(f"CREATE ROLE {ROLE} LOGIN IN ROLE extsvc_api")
        setup.execute(SETUP_SQL)
        norm = {n: setup.execute("SELECT extsvc.validate_dpf_helm_chart_data(%s)::text", [v]).fetchone()[0]
                for n, v in enumerate(VARIANTS)}
        sessions = []
        for _ in range(2):
            api, su = sqlx_pg.connect(dbname=DB, user=ROLE), sqlx_pg.connect(dbname=DB)
            conns += [api, su]
            sessions.append((api, su))
        monitor = psycopg.connect(dbname=DB, autocommit=True)
        conns.append(monitor)
        pids = [c.info.backend_pid for sess in sessions for c in sess]
        m = NicoModel()
        # machine ingestion, once: two DPF hosts with two DPUs each (the first primary)
        for n, (host, dpus) in enumerate(DPUS.items()):
            for k, d in enumerate(dpus):
                a = {"dpu": d, "host": host, "dev": f"conc-dev-{n}-{k}", "node": f"conc-node-{n}-{k}", "primary": k == 0}
                with sessions[0][0].transaction():
                    db.register_dpu(sessions[0][0], d, host, a["dev"], a["node"], a["primary"])
                m.register_dpu(a)
        for pair in range(args.pairs):
            ka, a_ops = Gen(rng, m, "a").txn()
            kb, b_ops = Gen(rng, m, "b", touched(m, a_ops)).txn()
            kinds[ka] += 1
            kinds[kb] += 1
            # the worker claims what it will complete before the pair starts
            claim_problem, leased = None, set()
            for op in a_ops + b_ops:
                if op["op"] in ("w_ready", "w_deleted"):
                    c = setup.execute("SELECT * FROM conc.w_claim(%s)", [op["args"]["sid"]]).fetchone()
                    op["args"]["claimed"], op["args"]["token"] = (c[0], str(c[1])) if c else (None, None)
                    # a row leased to the other session's pass is not claimable
                    want = (m.services[op["args"]["sid"]]["sv"]
                            if m.claimable(op["args"]["sid"]) and op["args"]["sid"] not in leased else None)
                    leased.add(op["args"]["sid"])
                    if op["args"]["claimed"] != want:
                        claim_problem = (f"the claim of {op['args']['sid']} gave state_version "
                                         f"{op['args']['claimed']}, the model {want}")
            ra, rb = {}, {}
            go = threading.Barrier(3)
            running, waited = [2], [0]

            def worker(sess, ops, out, seed):
                go.wait()
                out["t0"] = time.monotonic()
                run_txn(sess[0], sess[1], ops, random.Random(seed), out)
                out["t1"] = time.monotonic()
                running[0] -= 1
            ts = [threading.Thread(target=worker, args=(sessions[0], a_ops, ra, rng.random())),
                  threading.Thread(target=worker, args=(sessions[1], b_ops, rb, rng.random()))]
            for t in ts:
                t.start()
            go.wait()
            # a third session watches for a session waiting on a lock
            while running[0] > 0 and not waited[0]:
                if monitor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted AND pid = ANY (%s)",
                                   [pids]).fetchone()[0]:
                    waited[0] = 1
                time.sleep(0.0005)
            for t in ts:
                t.join(120)
            for r in (ra, rb):
                if r["answers"] and r["answers"][-1][0] == "error":
                    errors[f"{r['answers'][-1][1]} {r['answers'][-1][2] or '-'}"] += 1
                    stats["failed transactions"] += 1
                else:
                    stats["committed transactions"] += 1
            stats["pairs whose transactions overlapped"] += overlap(ra, rb)
            stats["pairs with a lock wait"] += waited[0]
            for op in a_ops + b_ops:
                if op["op"] in ("w_ready", "w_deleted"):
                    setup.execute("SELECT conc.w_release(%s)", [op["args"]["sid"]])   # a refused completion's lease
            verdict, m2, how = check_pair(m, a_ops, b_ops, ra, rb)
            verdict = claim_problem or verdict
            candidates = m2 if isinstance(m2, list) else [(None, m2)]
            if verdict is None and (pair % args.check_every == 0 or pair == args.pairs - 1 or len(candidates) > 1):
                real = json.loads(setup.execute(SNAPSHOT_SQL).fetchone()[0])
                diffs = [(n, c, diff_states(c.snapshot(norm), real)) for n, c in candidates]
                good = [(n, c) for n, c, d in diffs if not d]
                if not good:
                    verdict = "state after the pair differs from the model's" + "".join(
                        f"\n  in the order {n or 'of the one that committed'}:\n    " + "\n    ".join(d[:12])
                        for n, _, d in diffs)
                elif len(candidates) > 1:
                    how = both_how([n for n, _ in good])
                m2 = good[0][1] if good else candidates[0][1]
            else:
                m2 = candidates[0][1]
            if verdict is not None:
                failures += 1
                print(f"FAILED pair {pair} (seed {args.seed}): {verdict}")
                print(f"  A {ka}: {describe(a_ops)}\n    -> {ra['answers']}")
                print(f"  B {kb}: {describe(b_ops)}\n    -> {rb['answers']}")
                print(f"  the model: A alone {replay(m, a_ops)[0]}, B alone {replay(m, b_ops)[0]}")
                for who, r in (("A", ra), ("B", rb)):
                    if r.get("deadlock"):
                        print(f"  {who}'s 40P01, as the server described it:\n    "
                              + r["deadlock"].replace("\n", "\n    "))
                start = min(ra["t0"], rb["t0"])
                print("  timeline (ms from the start; an op's call and return, the transaction's end):")
                for who, r in (("A", ra), ("B", rb)):
                    print(f"    {who}: " + ", ".join(f"{o} {1e3 * (b - start):.1f}..{1e3 * (e - start):.1f}"
                                                  for o, b, e in r["trace"])
                          + f", end {1e3 * (r['commit'] - start):.1f}")
                # go on from the database's own state is not possible for the
                # model: stop at the first failure, with its trace
                break
            stats[how] += 1
            if args.verbose:
                print(f"pair {pair}: {ka} | {kb}: {how}")
            m = m2
    finally:
        for c in conns:
            c.close()
        if not args.keep:
            su0.execute(f"DROP DATABASE IF EXISTS {DB}")
            su0.execute(f"DROP ROLE IF EXISTS {ROLE}")
        su0.close()
    took = time.time() - t0
    pairs = sum(v for k, v in stats.items() if k.startswith(("both", "one")))
    print(f"outcomes: {', '.join(f'{k} {v}' for k, v in sorted(stats.items(), key=lambda x: str(x[0])))}")
    print(f"errors (all explained by a serial order): {', '.join(f'{k} {v}' for k, v in sorted(errors.items())) or 'none'}")
    print(f"concurrency: {pairs} pairs checked in {took:.1f} s (seed {args.seed}), "
          f"{errors.get('40P01 -', 0)} deadlocks, {failures} failed")
    if os.environ.get("WRITE_DOC"):
        write_doc(args, pairs, failures, stats, errors, kinds, took)
    return 1 if failures else 0


def write_doc(args, pairs, failures, stats, errors, kinds, took):
    """The run's figures and record, in the nico-concurrency-results block of
    docs/reliability.md (the summary table is refreshed from the record)."""
    from extsvc_testkit.invariants import run_record, run_stamp, write_doc_block
    pg = psycopg.connect(dbname="postgres", autocommit=True)
    version = pg.execute("SHOW server_version").fetchone()[0]
    pg.close()
    rec = {**run_stamp(), "seed": args.seed, "pairs": pairs, "failed": failures,
           "deadlocks": errors.get("40P01 -", 0), "overlapped": stats["pairs whose transactions overlapped"],
           "lock_waits": stats["pairs with a lock wait"], "committed": stats["committed transactions"],
           "refused": stats["failed transactions"], "seconds": round(took, 1)}
    outcomes = [(k, v) for k, v in sorted(stats.items()) if k.startswith(("both", "one"))]
    write_doc_block("nico-concurrency-results", "\n".join([
        "| pairs | overlapping | with a lock wait | transactions committed | refused (each explained) "
        "| 40P01 | unexplained | time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {pairs:,} | {rec['overlapped']:,} | {rec['lock_waits']:,} | {rec['committed']:,} | {rec['refused']:,} "
        f"| {rec['deadlocks']} | {failures} | {took:.0f} s |", "",
        "Outcomes: " + "; ".join(f"{k} {v}" for k, v in outcomes) + ".", "",
        "Refusals (SQLSTATE, constraint): " + "; ".join(f"{k} {v}" for k, v in sorted(errors.items())) + ".", "",
        "Handler transactions drawn: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ".", "",
        f"Measured {rec['date']} on commit `{rec['commit']}` (PostgreSQL {version}) by "
        f"`WRITE_DOC=1 /usr/bin/python3 test/nico/concurrency.py --pairs {args.pairs} --seed {args.seed}` "
        "in a cluster of scripts/lib/pgcluster.sh.",
        run_record("nico-conc", rec)]))


if __name__ == "__main__":
    sys.exit(main())
