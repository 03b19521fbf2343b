// Markdown tables for the CLI's reports.
#pragma once

#include <string>
#include <vector>

namespace qmv {

// Prints a markdown table with aligned columns; every row has header.size() cells.
void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);

}  // namespace qmv
