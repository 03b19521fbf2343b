#include <gtest/gtest.h>

#include <stdexcept>

#include "harness/shapes.h"

namespace qmv {
namespace {

TEST(Shapes, ExplicitListKeepsOrderAndDropsRepeats) {
  const auto s = parse_shapes("4096x11008, 1x256,4096x11008");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], (Shape{4096, 11008}));
  EXPECT_EQ(s[1], (Shape{1, 256}));
}

TEST(Shapes, DefaultPresetHasTheAwkwardAndTheModelShapes) {
  const auto s = parse_shapes("default");
  for (Shape want : {Shape{1, 256}, Shape{3, 14336}, Shape{67, 512}, Shape{4096, 4096}, Shape{11008, 4096},
                     Shape{4096, 11008}, Shape{32000, 4096}})
    EXPECT_NE(std::find(s.begin(), s.end(), want), s.end()) << to_string(want);
  EXPECT_EQ(s.size(), 16u + 3u);
}

TEST(Shapes, PresetAndExplicitMix) {
  const auto s = parse_shapes("llama-2-7b,5x512");
  EXPECT_EQ(s.size(), 5u);
  EXPECT_EQ(s.back(), (Shape{5, 512}));
}

TEST(Shapes, BadTokensNameThemselves) {
  for (const char* bad : {"4096", "x256", "4096x", "-1x256", "0x256", "axb", "12x34x56", "llama-9"}) {
    try {
      parse_shapes(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("bad shape"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_shapes(""), std::invalid_argument);
}

}  // namespace
}  // namespace qmv
