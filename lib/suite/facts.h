// bench --list_families: every registered family's facts as JSON (its
// sizes with their parameter counts, its cases, phases and dtypes with the
// counters each case reports, its default shapes and the default suite's
// CPU ones, the default suite's members and minimum time), the one source the Python
// suite (tools/ltb/pysuite) and its tests read instead of copies of the C++ settings.
#pragma once

#include <string>
#include <vector>

#include "family/family.h"

namespace ltb {

// The facts of `families`, as one JSON document (indented).
std::string FamilyFactsJson(const std::vector<Family>& families);

}  // namespace ltb
