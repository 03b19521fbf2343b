#include "harness/output_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace qmv {

OutputTarget output_target(const std::string& path) {
  if (path.empty()) throw std::runtime_error("empty output path");
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || status.type() == std::filesystem::file_type::not_found) return OutputTarget::Absent;
  switch (status.type()) {
    case std::filesystem::file_type::regular: return OutputTarget::Regular;
    case std::filesystem::file_type::character: return OutputTarget::Stream;
    case std::filesystem::file_type::directory:
      throw std::runtime_error(fmt::format("{}: is a directory, not a file to write", path));
    default: throw std::runtime_error(fmt::format("{}: is not a regular file; give a file path to write", path));
  }
}

std::string input_file_problem(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || status.type() == std::filesystem::file_type::not_found) return "no such file";
  if (status.type() == std::filesystem::file_type::directory) return "is a directory";
  if (status.type() != std::filesystem::file_type::regular) return "is not a regular file";
  return "";
}

std::string aside_path(const std::string& path) { return fmt::format("{}.partial-{}", path, ::getpid()); }

void write_file_atomically(const std::string& path, std::string_view content) {
  const OutputTarget target = output_target(path);
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create its directory: {}", path, ec.message()));
  const std::string written = target == OutputTarget::Stream ? path : aside_path(path);
  {
    std::ofstream out(written, std::ios::binary | std::ios::trunc);
    if (!out || !out.write(content.data(), static_cast<std::streamsize>(content.size())) || !out.flush()) {
      if (written != path) std::filesystem::remove(written, ec);
      throw std::runtime_error(fmt::format("{}: cannot write", path));
    }
  }
  if (written == path) return;
  if (std::rename(written.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::filesystem::remove(written, ec);
    throw std::runtime_error(fmt::format("{}: cannot move the written file into place: {}", path, std::strerror(err)));
  }
}

}  // namespace qmv
