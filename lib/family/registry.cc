#include "family/registry.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {
namespace {

std::vector<FamilyRegistration>& Registrations() {
  static auto* registrations = new std::vector<FamilyRegistration>;
  return *registrations;
}

bool SelftestRequested() {
  const char* env = std::getenv("LTB_SELFTEST");
  return env != nullptr && std::string(env) == "1";
}

}  // namespace

bool RegisterFamily(FamilyRegistration registration) {
  Registrations().push_back(std::move(registration));
  return true;
}

absl::StatusOr<std::vector<Family>> RegisteredFamilies(bool include_test_only) {
  return RegisteredFamilies(FamilyOptions{}, include_test_only);
}

absl::StatusOr<std::vector<Family>> RegisteredFamilies(const FamilyOptions& options,
                                                       bool include_test_only) {
  std::vector<FamilyRegistration> ordered = Registrations();
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const FamilyRegistration& a, const FamilyRegistration& b) {
                     return a.position < b.position;
                   });
  const bool test_only = include_test_only || SelftestRequested();
  std::vector<Family> families;
  std::set<std::string> names;
  for (const FamilyRegistration& r : ordered) {
    if (r.test_only && !test_only) continue;
    absl::StatusOr<Family> family = r.make(options);
    if (!family.ok()) return family.status();
    if (!names.insert(family->name).second) {
      return absl::InternalError(
          absl::StrCat("two families are called '", family->name, "' (", r.name, ")"));
    }
    // A family with nothing to offer in this run (Model without --model)
    // is left out.
    if (family->Cases().empty()) continue;
    families.push_back(*std::move(family));
  }
  // A family that loads no checkpoint refuses --weights, naming those that do.
  std::vector<std::string> loaders;
  for (const Family& f : families) {
    if (f.loads_weights) loaders.push_back(f.name);
  }
  for (Family& f : families) {
    if (f.loads_weights) continue;
    f.plan = [plan = f.plan, name = f.name,
              loaders](const BenchSpec& spec) -> absl::StatusOr<Plan> {
      if (spec.weights.empty()) return plan(spec);
      return absl::InvalidArgumentError(
          absl::StrCat(name, " does not load --weights; the families that do: ",
                       absl::StrJoin(loaders, ", ")));
    };
  }
  return families;
}

absl::StatusOr<const Family*> FindFamily(const std::vector<Family>& families,
                                         const std::string& name) {
  std::vector<std::string> valid;
  for (const Family& f : families) {
    if (f.name == name) return &f;
    valid.push_back(f.name);
  }
  return absl::NotFoundError(
      absl::StrCat("unknown family '", name, "'; valid: ", absl::StrJoin(valid, ", ")));
}

}  // namespace ltb
