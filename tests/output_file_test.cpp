// Outputs are written aside and moved into place when the run ends well: a run that fails
// leaves the file that was there byte for byte, and only a regular file is replaced.
#include "harness/output_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

#include "cli_run.h"
#include "harness/csv.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::expect_error;
using testing::qmvlab;
using testing::tmp;

std::string read(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

// A good file's fresh random contents.
std::string good_file(const std::string& path) {
  std::mt19937_64 rng(qmv::testing::fresh_seed());
  const std::string text = "a,b\n" + std::to_string(rng()) + "," + std::to_string(rng()) + "\n";
  std::ofstream(path, std::ios::binary) << text;
  return text;
}

bool leftovers_beside(const std::string& path) {
  const auto dir = std::filesystem::path(path).parent_path();
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".partial") != std::string::npos) return true;
  return false;
}

TEST(OutputFile, AFailedCsvRunLeavesTheOldFileAsItWas) {
  const std::string path = tmp("failed.csv");
  const std::string before = good_file(path);
  try {
    CsvWriter csv(path, {"a", "b"}, false);
    csv.write({"1", "2"});
    throw std::runtime_error("the run failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read(path), before);
  EXPECT_FALSE(leftovers_beside(path));
}

TEST(OutputFile, AFinishedCsvRunReplacesTheFileWhole) {
  const std::string path = tmp("finished.csv");
  good_file(path);
  {
    CsvWriter csv(path, {"x", "y"}, false);
    csv.write({"3", "4"});
    // Until the run ends, the old file is what a reader sees.
    EXPECT_EQ(read(path).substr(0, 4), "a,b\n");
  }
  EXPECT_EQ(read(path), "x,y\n3,4\n");
  EXPECT_FALSE(leftovers_beside(path));
  // close() moves it into place at once.
  CsvWriter again(path, {"z"}, false);
  again.write({"5"});
  again.close();
  EXPECT_EQ(read(path), "z\n5\n");
}

TEST(OutputFile, AppendingAddsWholeRowsToTheFileItself) {
  const std::string path = tmp("append.csv");
  { CsvWriter(path, {"a", "b"}, false).write({"1", "2"}); }
  try {
    CsvWriter csv(path, {"a", "b"}, true);
    csv.write({"3", "4"});
    throw std::runtime_error("the run failed after a row");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read(path), "a,b\n1,2\n3,4\n");
}

TEST(OutputFile, OnlyARegularFileIsReplaced) {
  const std::string dir = tmp("a-directory");
  std::filesystem::create_directories(dir);
  EXPECT_THROW(CsvWriter(dir, {"a"}, false), std::runtime_error);
  EXPECT_THROW(write_file_atomically(dir, "x"), std::runtime_error);
  const std::string fifo = tmp("a-fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(write_file_atomically(fifo, "x"), std::runtime_error);
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  // A character device is written in place, never renamed over.
  write_file_atomically("/dev/null", "discarded");
  { CsvWriter("/dev/null", {"a"}, false).write({"1"}); }
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

TEST(OutputFile, WholeFilesAreWrittenAsideAndRenamed) {
  const std::string path = tmp("whole/nested/report.md");
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second\n");
  EXPECT_EQ(read(path), "second\n");
  EXPECT_FALSE(leftovers_beside(path));
}

// Through the command line: a path that is not a regular file is refused in one line
// before anything runs, and the file system object is left as it was.
TEST(OutputFileCli, NonRegularOutputsAreRefused) {
  const std::string dir = tmp("out-dir");
  std::filesystem::create_directories(dir);
  expect_error("check --kernels f32.cpu.scalar --shapes 1x256 --out " + dir, "is a directory");
  expect_error("make-model --preset toy --mix q4_K_m --out " + dir, "is a directory");
  const std::string fifo = tmp("out-fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error("make-model --preset toy --mix q4_K_m --out " + fifo, "is not a regular file");
  expect_error("bench --kernels f32.cpu.scalar --shapes 1x256 --min-time 0.001 --out " + fifo, "is not a regular file");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  // make-model once renamed its finished file over /dev/null.
  expect_error("make-model --preset toy --mix q4_K_m --out /dev/null", "is not a regular file");
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
}

}  // namespace
}  // namespace qmv
