// The resync's label census (issue 25): for every DPU of this database, the registered placement
// keys its DPUDevice carries that nothing in the database names any more (removals a pass would
// derive from absence), and the keys the site never wrote. The orphan guard (src/pg) decides from
// it whether the passes may remove derived keys, and forgets purged keys no DPU carries. Reads
// the watch cache when it is current, else lists the DPUDevices once.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "controller/runtime.hpp"

namespace extsvc::controller {

struct CensusRow {
  std::string device;
  std::set<std::string> wanted;     // keys it must carry
  std::set<std::string> explained;  // keys its items name (wanted or not)
};

struct LabelCensus {
  bool complete = false;  // every DPUDevice was read (else nothing is concluded)
  std::string error;      // why not
  std::map<std::string, std::set<std::string>> derived;  // device -> derived removals
  std::set<std::string> present;              // every nico/extsvc-* key seen on these DPUs
  size_t dpus_with_site_keys = 0;             // DPUs carrying a registered key (the guard's base)
  size_t foreign_keys = 0;                    // unregistered keys on these DPUs (left alone)
  std::vector<std::string> foreign_examples;  // "device: key", the first few, for the log
};

LabelCensus label_census(Runtime& rt, const std::vector<CensusRow>& rows,
                         const std::set<std::string>& registered);

}  // namespace extsvc::controller
