// One dpfsim child process for the whole test binary, started on first use and
// stopped at exit. Every fixture's SetUp resets it (POST /reset: objects,
// faults, kill points, pod and chart knobs, delays, watch window and open
// watch streams), so each test starts from the same state it would get from a
// process of its own, without paying a start per fixture.
#pragma once

#include <memory>

#include "sim_harness.h"

namespace extsvc::testfixture {

inline simtest::SimProcess& shared_reconcile_sim() {
  static const std::unique_ptr<simtest::SimProcess> sim =
      simtest::SimProcess::start({"--dpus", "3", "--seed", "9"});
  return *sim;
}

}  // namespace extsvc::testfixture
