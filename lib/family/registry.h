// The family registry: every model file registers its family here, and the
// suite, the tests and the tools enumerate families from it. Adding a family
// is adding one model file under lib/models/ that ends with
//
//   LTB_REGISTER_FAMILY(MyFamily, 80);
//
// where MyFamily() returns a Family (or absl::StatusOr<Family>, when its
// settings can be invalid), taking the run's FamilyOptions when it has
// settings of its own, and 80 is its position in listings.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "family/family.h"

namespace ltb {

// The settings of a run that families read, as pure values: the suite fills
// them from its flags (suite/flags.h) and hands them to every factory, so
// that no model file reads a flag.
struct FamilyOptions {
  // --model, --inputs, --flops_per_step: the model files the Model family
  // measures, their inputs and their FLOPs a step; "" when not given.
  std::vector<std::string> model_files;
  std::string model_inputs;
  std::string model_flops_per_step;
  // --d_model, --nhead, --num_encoder_layers, --num_decoder_layers,
  // --dim_feedforward: EncDec's architecture applied to every size; 0 when
  // not given.
  int64_t d_model = 0;
  int64_t heads = 0;
  int64_t encoder_layers = 0;
  int64_t decoder_layers = 0;
  int64_t d_ff = 0;
};

using FamilyFactory = absl::StatusOr<Family> (*)(const FamilyOptions&);

struct FamilyRegistration {
  std::string name;  // the factory's, for messages
  FamilyFactory make;
  int position = 0;        // families are listed and run by position
  bool test_only = false;  // registered only when LTB_SELFTEST=1
};

// Called by the macros below during static initialisation.
bool RegisterFamily(FamilyRegistration registration);

// Every registered family, built from `options` by its factory, by position:
// those for tests only when `include_test_only` or the environment sets
// LTB_SELFTEST=1. An error when a family's own settings are invalid, or two
// families share a name.
absl::StatusOr<std::vector<Family>> RegisteredFamilies(const FamilyOptions& options,
                                                       bool include_test_only = false);
// The same with no settings of the command line (every default).
absl::StatusOr<std::vector<Family>> RegisteredFamilies(bool include_test_only = false);

// The family called `name` among `families`; an error naming the valid ones.
absl::StatusOr<const Family*> FindFamily(const std::vector<Family>& families,
                                         const std::string& name);

namespace registry_internal {
// Calls a factory with the options when it takes them, else without.
template <typename Factory>
absl::StatusOr<Family> Make(const Factory& factory, const FamilyOptions& options) {
  if constexpr (std::is_invocable_v<Factory, const FamilyOptions&>) {
    return factory(options);
  } else {
    return factory();
  }
}
}  // namespace registry_internal

}  // namespace ltb

// The generic lambda resolves an overloaded factory's name at the call.
#define LTB_REGISTER_FAMILY_IMPL(factory, position, test_only)                      \
  static const bool ltb_registered_##factory = ::ltb::RegisterFamily(               \
      {#factory,                                                                    \
       [](const ::ltb::FamilyOptions& options) -> ::absl::StatusOr<::ltb::Family> { \
         return ::ltb::registry_internal::Make(                                     \
             [](const auto&... args) -> decltype(factory(args...)) {                \
               return factory(args...);                                             \
             },                                                                     \
             options);                                                              \
       },                                                                           \
       position, test_only})
#define LTB_REGISTER_FAMILY(factory, position) \
  LTB_REGISTER_FAMILY_IMPL(factory, position, false)
#define LTB_REGISTER_TEST_FAMILY(factory, position) \
  LTB_REGISTER_FAMILY_IMPL(factory, position, true)
