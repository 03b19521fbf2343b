// The column reader under every results-CSV reader of the harness (csv.cpp, summary.cpp):
// named columns, some optional, each row's fields by name, numbers parsed whole with the
// file, line and column in any error. For the harness's .cpp files only.
#pragma once

#include <fmt/format.h>

#include <array>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "harness/csv.h"
#include "harness/fccp.h"
#include "harness/output_file.h"

namespace qmv::csv_columns {

// One row of a file being read: its fields as text, by column name.
struct Fields {
  const std::string& path;
  const char* const* names;
  const std::string* fields;
  std::size_t count;
  unsigned line = 0;

  const std::string& operator[](std::string_view column) const {
    for (std::size_t i = 0; i < count; ++i)
      if (column == names[i]) return fields[i];
    throw std::logic_error(fmt::format("CSV reader asks for column '{}' it did not name", column));
  }
  // Empty reads as 0, as the GPU columns of a CPU row and a sweep's untimed points are.
  template <class T>
  T number(std::string_view column) const {
    return number_or<T>(column, T{});
  }
  // Empty reads as `empty`; anything else must be a number.
  template <class T>
  T number_or(std::string_view column, T empty) const {
    const std::string& text = (*this)[column];
    return text.empty() ? empty : csv_number<T>(text, path, line, column);
  }
  // Must be a number, empty included.
  template <class T>
  T required(std::string_view column) const {
    return csv_number<T>((*this)[column], path, line, column);
  }
};

// Reads the columns `names` of `path` (the first `required` of them must be in the
// header, the rest may be missing and read as ""), handing each row to `each`; with
// `present`, which of the columns the header has.
template <std::size_t N, class Fn>
void read(const std::string& path, const char* kind, const std::array<const char*, N>& names, std::size_t required,
          Fn each, std::array<bool, N>* present = nullptr) {
  if (const std::string problem = input_file_problem(path); !problem.empty())
    throw std::runtime_error(fmt::format("{}: {}", path, problem));
  using In = io::CSVReader<N, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>>;
  std::optional<In> in;
  std::array<std::string, N> fields;
  Fields row{path, names.data(), fields.data(), N, 0};
  try {
    in.emplace(path);
    std::apply([&](auto... n) { in->read_header(io::ignore_extra_column | io::ignore_missing_column, n...); },
               names);
    std::string missing;
    for (std::size_t i = 0; i < required; ++i)
      if (!in->has_column(names[i])) missing += (missing.empty() ? "" : ", ") + std::string(names[i]);
    if (!missing.empty())
      throw std::runtime_error(fmt::format("{}: not a {} CSV: the header has no column(s) {}", path, kind, missing));
    if (present)
      for (std::size_t i = 0; i < N; ++i) (*present)[i] = in->has_column(names[i]);
    while (std::apply([&](auto&... f) { return in->read_row(f...); }, fields)) {
      row.line = in->get_file_line();
      each(std::as_const(row));
    }
  } catch (const io::error::base& e) {
    throw std::runtime_error(csv_read_error(path, in ? in->get_file_line() : 0, e));
  }
}

}  // namespace qmv::csv_columns
