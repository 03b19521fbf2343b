// Markdown tables for the CLI's reports.
#pragma once

#include <string>
#include <vector>

#include "model/plan.h"

namespace qmv {

// Prints a markdown table with aligned columns; every row has header.size() cells.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

// Prints a resolved plan as a table, in forward-pass order: op, weights, shape,
// matvecs, kernel, its measured GB/s, the runner-up, where the choice came from (plan,
// measured now, the store and its date, static order), and with outlier routing the
// kernel outlier vectors go to.
void print_plan(const std::vector<PlannedMatvec>& planned);

}  // namespace qmv
