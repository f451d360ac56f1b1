"""extsvc_testkit: the Python test kit of nico_extsvc, shared by the
end-to-end suites (test/e2e/), the SQL-level suites (test/nico/,
test/model/, test/upgrade/), the soak (test/soak/), the benchmarks (bench/),
the docs checks (tools/) and the demo (scripts/demo.py).

  extsvc_testkit.cluster     the one way to make a throw-away PostgreSQL
                             cluster: initdb once per test command into a
                             template (EXTSVC_PG_TEMPLATE), a copy per cluster
                             with a system identifier of its own
  extsvc_testkit.db          SQL over kept psycopg 3 connections (Conn, Conns;
                             Session for two-session race tests; SqlError)
  extsvc_testkit.harness     a cluster with the worker talking TLS + bearer
                             token to a real dpfsim (Env, Postgres, Sim,
                             run_tests, wait_until, ...) and the helpers the
                             e2e suites share (Env.attach, Env.ready_service,
                             Env.new_instance, Sim.pods_on, Sim.device_labels, ...)
  extsvc_testkit.invariants  what the reliability suites check at a quiescent
                             point (violations, describe, write_doc_block)
  extsvc_testkit.patroni     a throw-away Patroni cluster: one etcd member and
                             N PostgreSQL servers managed by Patroni (Etcd,
                             Cluster, Member, member_config); needs Debian's
                             patroni and etcd-server, runs Patroni as the
                             PostgreSQL user

Importers say `from extsvc_testkit import harness` (or
`from extsvc_testkit.harness import Env`); nothing edits the import path. The
package is found through PYTHONPATH: scripts/lib/common.sh prepends the
repository's python/ directory, and the shell entry points (test-all.sh,
test/e2e/run.sh, bench/run.sh, scripts/demo.sh) source it. It needs Debian's
python3-psycopg, installed for /usr/bin/python3 (the python3 first on PATH
may be another interpreter): every script runs /usr/bin/python3. A test or
bench file run by hand, from the repository root:

  PYTHONPATH=python /usr/bin/python3 test/e2e/test_workers.py
  PYTHONPATH=python /usr/bin/python3 bench/worker_latency.py

The harness finds the build through BUILD_DIR (default build/ of this
repository) and dpfsim through DPFSIM (default $BUILD_DIR/sim/dpfsim).
"""
