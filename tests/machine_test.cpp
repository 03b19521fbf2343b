// The commit results rows name (harness/machine.h): a bundle run away from its source
// tree names the commit it was built from, through QMV_GIT_COMMIT; otherwise the tree's.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <random>
#include <string>

#include "harness/machine.h"

namespace qmv {
namespace {

// Restores QMV_GIT_COMMIT as the test found it.
class CommitEnv {
 public:
  CommitEnv() {
    if (const char* v = std::getenv("QMV_GIT_COMMIT")) saved_ = v, had_ = true;
  }
  ~CommitEnv() {
    if (had_) {
      setenv("QMV_GIT_COMMIT", saved_.c_str(), 1);
    } else {
      unsetenv("QMV_GIT_COMMIT");
    }
  }

 private:
  std::string saved_;
  bool had_ = false;
};

bool is_tree_commit(const std::string& c) {
  if (c == "unknown") return true;  // built outside a git checkout
  std::string hash = c;
  if (hash.size() > 6 && hash.compare(hash.size() - 6, 6, "+dirty") == 0) hash.resize(hash.size() - 6);
  if (hash.size() != 12) return false;
  for (char ch : hash)
    if (!std::isxdigit(static_cast<unsigned char>(ch))) return false;
  return true;
}

TEST(SourceCommit, TheBundlesCommitWinsOverTheTreesWhereSet) {
  CommitEnv restore;
  std::mt19937_64 rng(std::random_device{}());
  const std::string built = "b" + std::to_string(rng()) + "+dirty";
  setenv("QMV_GIT_COMMIT", built.c_str(), 1);
  EXPECT_EQ(source_commit(), built);
}

TEST(SourceCommit, WithoutItTheTreesOwnHash) {
  CommitEnv restore;
  unsetenv("QMV_GIT_COMMIT");
  const std::string tree = source_commit();
  EXPECT_TRUE(is_tree_commit(tree)) << tree;
  setenv("QMV_GIT_COMMIT", "", 1);  // set but empty: as if unset
  EXPECT_EQ(source_commit(), tree);
}

}  // namespace
}  // namespace qmv
