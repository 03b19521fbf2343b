// Output files written aside and moved into place when the run ends well: a run that
// fails leaves the file that was there as it was, and only a regular file is replaced.
#pragma once

#include <string>
#include <string_view>

namespace qmv {

enum class OutputTarget {
  Absent,   // nothing there yet
  Regular,  // a regular file: replaced by renaming a finished copy over it
  Stream,   // a character device (/dev/stdout, /dev/null): written in place, never renamed over
};

// What `path` is as an output. Throws std::runtime_error naming the path when it is a
// directory, a FIFO, a socket or anything else no output may replace.
OutputTarget output_target(const std::string& path);

// Where a file replacing `path` is written first (beside it, so the rename stays on one
// file system): path + ".partial-<pid>".
std::string aside_path(const std::string& path);

// Writes `content` to `path`: aside and renamed over it, or in place on a Stream.
// Creates parent directories. Throws std::runtime_error naming the path on failure,
// leaving what was at `path` as it was.
void write_file_atomically(const std::string& path, std::string_view content);

// Why `path` cannot be read as an input file ("no such file", "is a directory", "is not
// a regular file"), or "" when it is a regular file.
std::string input_file_problem(const std::string& path);

}  // namespace qmv
