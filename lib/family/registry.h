// The family registry: every model file registers its family here, and the
// suite, the tests and the tools enumerate families from it. Adding a family
// is adding one model file under lib/models/ that ends with
//
//   LTB_REGISTER_FAMILY(MyFamily, 80);
//
// where MyFamily() returns a Family (or absl::StatusOr<Family>, when it reads
// flags of its own that can be invalid) and 80 is its position in listings.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

using FamilyFactory = absl::StatusOr<Family> (*)();

struct FamilyRegistration {
  std::string name;  // the factory's, for messages
  FamilyFactory make;
  int position = 0;        // families are listed and run by position
  bool test_only = false;  // registered only when LTB_SELFTEST=1
};

// Called by the macros below during static initialisation.
bool RegisterFamily(FamilyRegistration registration);

// Every registered family, built, by position: those for tests only when
// `include_test_only` or the environment sets LTB_SELFTEST=1. An error when a
// family's own flags are invalid, or two families share a name.
absl::StatusOr<std::vector<Family>> RegisteredFamilies(bool include_test_only = false);

// The family called `name` among `families`; an error naming the valid ones.
absl::StatusOr<const Family*> FindFamily(const std::vector<Family>& families,
                                         const std::string& name);

}  // namespace ltb

#define LTB_REGISTER_FAMILY_IMPL(factory, position, test_only)                  \
  static const bool ltb_registered_##factory = ::ltb::RegisterFamily(           \
      {#factory, []() -> ::absl::StatusOr<::ltb::Family> { return factory(); }, \
       position, test_only})
#define LTB_REGISTER_FAMILY(factory, position) \
  LTB_REGISTER_FAMILY_IMPL(factory, position, false)
#define LTB_REGISTER_TEST_FAMILY(factory, position) \
  LTB_REGISTER_FAMILY_IMPL(factory, position, true)
