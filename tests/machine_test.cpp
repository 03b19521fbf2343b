// The commit results rows name (harness/machine.h): a bundle run away from its source
// tree names the commit it was built from, through QMV_GIT_COMMIT; otherwise the tree's.
#include <gtest/gtest.h>

#include <cctype>
#include <optional>
#include <random>
#include <string>

#include "harness/machine.h"
#include "tests/scoped_env.h"

namespace qmv {
namespace {

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
  std::mt19937_64 rng(std::random_device{}());
  const std::string built = "b" + std::to_string(rng()) + "+dirty";
  const testing::ScopedEnv env({{"QMV_GIT_COMMIT", built}});
  EXPECT_EQ(source_commit(), built);
}

TEST(SourceCommit, WithoutItTheTreesOwnHash) {
  std::string tree;
  {
    const testing::ScopedEnv env({{"QMV_GIT_COMMIT", std::nullopt}});
    tree = source_commit();
  }
  EXPECT_TRUE(is_tree_commit(tree)) << tree;
  const testing::ScopedEnv empty({{"QMV_GIT_COMMIT", std::string()}});  // set but empty: as if unset
  EXPECT_EQ(source_commit(), tree);
}

}  // namespace
}  // namespace qmv
