// Q8_0 weights x 1 to 8 f32 activation vectors per call, the scalar reference of the
// batch op (batch.h): each row dequantized once, then a float dot per vector.
#include "batch.h"

QMV_REGISTER_KERNEL(qmv::scalar_batch::record(
    "q8_0.cpu.scalar_batch_f32", qmv::WeightType::Q8_0, qmv::scalar_batch::run<qmv::WeightType::Q8_0>,
    "Q8_0 x 1-8 f32 vectors (batch), scalar reference: each row dequantized once, a float dot per vector"));
