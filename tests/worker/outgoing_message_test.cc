// What OutgoingMessage hands TensorPipe (serialization.h), in one process.
#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <tensorpipe/tensorpipe.h>

#include "serialization.h"

namespace rpcjob::runtime {
namespace {

// Every tensor names its target device, so TensorPipe sends it at once rather
// than first waiting for the receiver's descriptor reply (a round trip). A host
// tensor lands in host memory on the receiver (prepareRead), whatever its size.
TEST(OutgoingMessage, EveryHostTensorNamesHostMemoryAsItsTarget) {
  c10::List<at::Tensor> tensors({at::ones({4}), at::arange(12, at::kLong).reshape({3, 4}).t(),
                                 at::ones({1 << 20}, at::kByte), at::ones({0})});
  wire::Header header;
  c10::IValue value(tensors);
  auto out = makeMessage(header, &value);
  tensorpipe::Message m = out->toTensorpipe();
  ASSERT_EQ(m.tensors.size(), 4u);
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = m.tensors[i];
    ASSERT_TRUE(t.targetDevice.has_value()) << "tensor " << i;
    EXPECT_EQ(*t.targetDevice, (tensorpipe::Device{tensorpipe::kCpuDeviceType, 0})) << i;
    EXPECT_EQ(t.buffer.device(), (tensorpipe::Device{tensorpipe::kCpuDeviceType, 0})) << i;
    EXPECT_EQ(t.length, out->tensors[i].nbytes()) << i;
  }
}

}  // namespace
}  // namespace rpcjob::runtime
