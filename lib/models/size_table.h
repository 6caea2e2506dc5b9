// Every family keeps a table of named sizes: finding one by name, and the
// table as `bench --list_families` prints it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ltb {

// An entry of a family's size table: its options, and the parameter count
// its card in shared/MODELS.md gives.
template <typename Options>
struct NamedSize {
  std::string name;
  Options options;
  int64_t card_params;
};

// `field` of the size called `name`, or an error naming the family's valid
// sizes, then `other_forms` (", or ..." for names outside the table).
template <typename Size, typename Field>
absl::StatusOr<Field> FindSize(const std::string& family, const std::vector<Size>& sizes,
                               const std::string& name, Field Size::*field,
                               const std::string& other_forms = "") {
  std::vector<std::string> names;
  for (const Size& s : sizes) {
    if (s.name == name) return s.*field;
    names.push_back(s.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", family, " size '", name,
                                                 "'; valid: ", absl::StrJoin(names, ", "),
                                                 other_forms));
}

// A size table as JSON text, in order: each size's name, card parameter
// count (shared/MODELS.md) and options, as `options_json` writes them.
template <typename Size, typename OptionsJson>
std::string SizeCards(const std::vector<Size>& sizes, OptionsJson options_json) {
  nlohmann::ordered_json cards = nlohmann::ordered_json::array();
  for (const Size& s : sizes) {
    cards.push_back({{"name", s.name},
                     {"card_params", s.card_params},
                     {"options", options_json(s.options)}});
  }
  return cards.dump();
}

}  // namespace ltb
