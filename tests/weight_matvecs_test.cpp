// The one table of the step's weight matrices (model/ops.h) against the tensors a
// model binds: names, shapes and the fused pair.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/ops.h"
#include "tests/tiny_model.h"

namespace qmv {
namespace {

using qmv::testing::TinySpec;
using qmv::testing::tiny_model;

Shape shape_of(const gguf::Tensor* t) {
  return {static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])};
}

TEST(WeightMatvecs, NameAndShapeEveryTensorEachArchitectureBinds) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    TinySpec s;
    s.arch = arch;
    if (s.arch == "qwen3") s.key_length = 32;  // q wider than the embedding
    s.tied = s.arch != "qwen2";
    const auto bytes = tiny_model(s);
    const auto f = gguf::File::parse(bytes);
    const ModelConfig c = read_config(f);
    const ModelWeights w = bind_weights(f, c);
    const ModelWidths widths = model_widths(c);
    for (std::size_t i = 0; i < w.layers.size(); ++i)
      for (const WeightMatvec& m : kLayerMatvecs) {
        const gguf::Tensor* t = w.layers[i].*m.weight;
        ASSERT_NE(t, nullptr) << arch << " " << m.op;
        EXPECT_EQ(t->name, m.tensor_name(static_cast<int>(i))) << arch;
        EXPECT_EQ(shape_of(t), m.shape(widths)) << arch << " " << m.op;
        EXPECT_EQ(t->dims, m.dims(widths)) << arch << " " << m.op;
      }
    EXPECT_EQ(shape_of(w.output), kLmHead.shape(widths)) << arch;
    EXPECT_EQ(w.output->name, s.tied ? "token_embd.weight" : kLmHead.tensor_name(-1)) << arch;
  }
}

TEST(WeightMatvecs, EveryPlannedOpButTheFusedOneHasOneMatrix) {
  for (const Op op : matvec_ops()) {
    if (op == kUpGate.fused) {
      EXPECT_THROW(weight_matvec(op), std::logic_error);
      continue;
    }
    EXPECT_EQ(weight_matvec(op).op, op);
  }
  EXPECT_TRUE(weight_matvec(kUpGate.first).fusable);
  EXPECT_TRUE(weight_matvec(kUpGate.second).fusable);
  EXPECT_EQ(weight_matvec(kUpGate.first).shape(ModelWidths{1, 2, 3, 4, 5}),
            weight_matvec(kUpGate.second).shape(ModelWidths{1, 2, 3, 4, 5}));
  EXPECT_EQ(std::size(kLayerMatvecOps), std::size(kLayerMatvecs) + 1);
  EXPECT_EQ(kLmHead.op, Op::LmHead);
}

}  // namespace
}  // namespace qmv
