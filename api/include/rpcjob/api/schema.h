#pragma once
// The shape of the manifest the parser accepts: for each object, its field names;
// for each enumerated field, its values. The parser reads its strict key sets and
// enums from these tables, and tests/api/crd_agreement_test.cc checks that the CRD's
// schema has exactly the same fields and enums, so the two cannot drift apart.
//
// Paths: "spec.placement"; list items add "[]": "spec.workers[]". The pod template
// ("spec.workers[].template") and map-valued fields (labels, device maps) are
// leaves: their keys are free.

#include <map>
#include <set>
#include <string>
#include <vector>

namespace rpcjob::api {

// Object path -> field names. "" is the document root.
const std::map<std::string, std::set<std::string>>& objectFields();
// Field path -> allowed values (as strings; workersPerPod's "1" is also the integer 1).
const std::map<std::string, std::vector<std::string>>& enumFields();

}  // namespace rpcjob::api
