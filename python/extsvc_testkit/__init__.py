"""extsvc_testkit: the Python test kit of nico_extsvc, shared by the
end-to-end suites (test/e2e/), the upgrade test (test/upgrade/), the
benchmarks (bench/) and the demo (scripts/demo.py).

  extsvc_testkit.harness     a throw-away PostgreSQL cluster with the worker
                             talking TLS + bearer token to a real dpfsim
                             (Env, Postgres, Sim, run_tests, wait_until, ...)
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
test/e2e/run.sh, bench/run.sh, scripts/demo.sh) source it. A test or bench
file run by hand needs the same, from the repository root:

  PYTHONPATH=python python3 test/e2e/test_workers.py
  PYTHONPATH=python python3 bench/worker_latency.py

The harness finds the build through BUILD_DIR (default build/ of this
repository) and dpfsim through DPFSIM (default $BUILD_DIR/sim/dpfsim).
Python standard library only.
"""
