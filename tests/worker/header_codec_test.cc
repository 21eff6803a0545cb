#include "header_codec.h"

#include <gtest/gtest.h>

namespace rpcjob::wire {
namespace {

TEST(HeaderCodec, RoundTripsEveryField) {
  Header h;
  h.type = MessageType::kRemoteCall;
  h.errorKind = ErrorKind::kRemoteException;
  h.id = 0x0123456789abcdefULL;
  h.timeoutMs = 1500;
  h.function = "train.step";
  h.error = "boom";
  h.hasRRef = true;
  h.rref = {3, 42};
  h.fork = {4, 7};
  std::string bytes = encodeHeader(h);
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out.type, h.type);
  EXPECT_EQ(out.errorKind, h.errorKind);
  EXPECT_EQ(out.id, h.id);
  EXPECT_EQ(out.timeoutMs, h.timeoutMs);
  EXPECT_EQ(out.function, h.function);
  EXPECT_EQ(out.error, h.error);
  EXPECT_TRUE(out.hasRRef);
  EXPECT_EQ(out.rref, h.rref);
  EXPECT_EQ(out.fork, h.fork);
}

TEST(HeaderCodec, EveryTruncationIsAnError) {
  Header h;
  h.function = "f";
  h.hasRRef = true;
  std::string bytes = encodeHeader(h);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Header out;
    EXPECT_NE(decodeHeader(bytes.data(), n, out), "") << "length " << n;
  }
}

TEST(HeaderCodec, RejectsWrongVersionTypeAndLengths) {
  std::string bytes = encodeHeader(Header{});
  Header out;
  std::string v = bytes;
  v[2] = 9;
  EXPECT_NE(decodeHeader(v.data(), v.size(), out).find("version"), std::string::npos);
  std::string t = bytes;
  t[3] = 77;
  EXPECT_NE(decodeHeader(t.data(), t.size(), out).find("message type"), std::string::npos);
  std::string l = bytes;
  l[18] = '\xff';  // function length 0xff.. beyond the limit and the data
  l[19] = '\xff';
  EXPECT_NE(decodeHeader(l.data(), l.size(), out), "");
}

TEST(TensorMetaCodec, RoundTripAndRejectsBadShapes) {
  TensorMeta m;
  m.dtype = 6;
  m.sizes = {2, 0, 3};
  std::string bytes = encodeTensorMeta(m);
  TensorMeta out;
  ASSERT_EQ(decodeTensorMeta(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out.sizes, m.sizes);
  m.sizes = {-1};
  bytes = encodeTensorMeta(m);
  EXPECT_NE(decodeTensorMeta(bytes.data(), bytes.size(), out), "");
  m.sizes = {int64_t{1} << 40, int64_t{1} << 40};
  bytes = encodeTensorMeta(m);
  EXPECT_NE(decodeTensorMeta(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(numElements({int64_t{1} << 31, int64_t{1} << 31, 4}), -1);
}

TEST(ChannelDescriptorCodec, RoundTrip) {
  ChannelDescriptors d = {{"cma", {{"cpu:0", "boot-id/ns"}}}, {"transport:shm", {{"domain", "x"}}}};
  std::string bytes = encodeChannelDescriptors(d);
  ChannelDescriptors out;
  ASSERT_EQ(decodeChannelDescriptors(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out, d);
  EXPECT_NE(decodeChannelDescriptors(bytes.data(), bytes.size() - 1, out), "");
}

}  // namespace
}  // namespace rpcjob::wire
