// LaneFrame (worker/src/lane_frame.h) against makeMessage, the pipe's path: the
// same bytes for every message a lane may carry (the frame is makeMessage's
// header, then appendOrder, then appendInlinePayload; toMessage() is
// makeMessage's message), a refusal for every other (pickled values, tensors
// for a channel, payloads over the inline limit), and a buffer reused, not
// reallocated, from one frame to the next on a thread.
#include "lane_frame.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rpcjob::runtime {
namespace {

wire::Header callHeader() {
  wire::Header h;
  h.type = wire::MessageType::kCall;
  h.id = 12345;
  h.function = "rpcjob.echo";
  return h;
}

// A string whose fast payload (magic, version, tag, u32 length, bytes) is `bytes` long.
c10::IValue stringOfPayload(size_t bytes) {
  return c10::IValue(std::string(bytes - 2 - 1 - 4, 's'));
}

// Encodes `value` both ways and compares every byte, for a few orders.
void expectSameAsMakeMessage(const wire::Header& h, const c10::IValue* value) {
  const auto made = makeMessage(h, value);
  ASSERT_TRUE(made->tensors.empty());
  for (const uint64_t order : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}}) {
    LaneFrame frame;
    ASSERT_TRUE(frame.encode(h, value));
    ASSERT_TRUE(frame.encoded());
    std::string expected = made->header;
    wire::appendOrder(expected, order);
    if (made->hasPayload) {
      wire::appendInlinePayload(expected, made->payload.data(), made->payload.size());
    }
    frame.setOrder(order);
    EXPECT_EQ(std::string(frame.data(), frame.size()), expected);
    const auto back = frame.toMessage();
    EXPECT_EQ(back->header, made->header);
    EXPECT_GE(back->header.capacity(), made->header.capacity());  // room for order and payload
    EXPECT_EQ(back->payload, made->payload);
    EXPECT_EQ(back->hasPayload, made->hasPayload);
    EXPECT_TRUE(back->tensors.empty());
  }
}

TEST(LaneFrame, EncodesWhatMakeMessageMakes) {
  const at::Tensor strided = at::arange(24, at::kFloat).reshape({4, 6}).t();  // not contiguous
  std::vector<c10::IValue> values = {
      c10::IValue(),
      c10::IValue(true),
      c10::IValue(int64_t{-42}),
      c10::IValue(3.5),
      c10::IValue(std::string("hello")),
      c10::IValue(at::arange(100, at::kFloat)),
      c10::IValue(strided),
      c10::IValue(at::ones({2, 3}, at::kLong)),
      c10::IValue(c10::ivalue::Tuple::create(
          {c10::IValue(int64_t{1}), c10::IValue(std::string("x")), c10::IValue(at::zeros({3})),
           c10::IValue(c10::ivalue::Tuple::create({c10::IValue(), c10::IValue(false)}))})),
      stringOfPayload(wire::kMaxInlinePayload),  // the largest payload that goes inline
  };
  wire::Header h = callHeader();
  expectSameAsMakeMessage(h, nullptr);  // a header alone
  for (const auto& v : values) expectSameAsMakeMessage(h, &v);
  // Headers with every optional field: a response, an RRef call, autograd.
  wire::Header response;
  response.type = wire::MessageType::kResponse;
  response.id = 9;
  expectSameAsMakeMessage(response, &values[2]);
  wire::Header remote = callHeader();
  remote.type = wire::MessageType::kRemoteCall;
  remote.hasRRef = true;
  remote.rref = {1, 2};
  remote.fork = {3, 4};
  expectSameAsMakeMessage(remote, &values[8]);
  wire::Header grad = callHeader();
  grad.hasAutograd = true;
  grad.autogradContext = 5;
  grad.autogradSendId = 6;
  grad.requiresGrad = {true, false, true};
  expectSameAsMakeMessage(grad, &values[5]);
}

TEST(LaneFrame, RefusesWhatALaneMayNotCarry) {
  const wire::Header h = callHeader();
  const std::vector<c10::IValue> refused = {
      stringOfPayload(wire::kMaxInlinePayload + 1),  // one byte over the inline limit
      c10::IValue(at::zeros({wire::kFastInlineTensorBytes / 4 + 1}, at::kFloat)),  // by channel
      c10::IValue(c10::List<int64_t>({1, 2, 3})),                                  // pickled
      c10::IValue(at::ones({2}).requires_grad_()),                                 // pickled
  };
  for (const auto& v : refused) {
    LaneFrame frame;
    EXPECT_FALSE(frame.encode(h, &v));
    EXPECT_FALSE(frame.encoded());
    // makeMessage still carries it: the pipe's way, as before.
    const auto made = makeMessage(h, &v);
    EXPECT_TRUE(made->hasPayload);
  }
}

TEST(LaneFrame, ReusesTheThreadsBufferAndNestsSafely) {
  const wire::Header h = callHeader();
  const c10::IValue big = stringOfPayload(wire::kMaxInlinePayload);
  const c10::IValue small(int64_t{1});
  const char* first;
  {
    LaneFrame frame;
    ASSERT_TRUE(frame.encode(h, &big));
    first = frame.data();
  }
  {
    LaneFrame frame;  // the same memory: no allocation once grown
    ASSERT_TRUE(frame.encode(h, &small));
    EXPECT_EQ(frame.data(), first);
    // A frame made while this one lives (a callback that calls) has its own.
    const std::string before(frame.data(), frame.size());
    {
      LaneFrame nested;
      ASSERT_TRUE(nested.encode(h, &big));
      EXPECT_NE(nested.data(), frame.data());
    }
    EXPECT_EQ(std::string(frame.data(), frame.size()), before);
  }
  // One of the two was kept, large enough: the next frames reuse it.
  const char* kept;
  {
    LaneFrame frame;
    ASSERT_TRUE(frame.encode(h, &big));
    kept = frame.data();
  }
  LaneFrame again;
  ASSERT_TRUE(again.encode(h, &big));
  EXPECT_EQ(again.data(), kept);
}

}  // namespace
}  // namespace rpcjob::runtime
