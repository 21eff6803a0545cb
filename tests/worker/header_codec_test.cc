#include "header_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

// encodeHeader allocates once, for encodedHeaderSize() bytes plus the spare:
// a size that undercounts would reallocate, one that overcounts waste.
TEST(HeaderCodec, EncodedSizeIsExactAndSpareIsReserved) {
  std::vector<Header> headers(5);
  headers[1].function = std::string(kMaxFunctionName + 10, 'f');  // cut to the maximum
  headers[2].error = "a remote exception's message";
  headers[3].hasRRef = true;
  headers[4].hasAutograd = true;
  headers[4].requiresGrad = {true, false, true, true, false, false, true, false, true};
  for (const Header& h : headers) {
    const std::string bytes = encodeHeader(h, 100);
    EXPECT_EQ(bytes.size(), encodedHeaderSize(h));
    EXPECT_GE(bytes.capacity(), bytes.size() + 100);
    Header out;
    EXPECT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  }
  std::string withPayload = encodeHeader(headers[2], 4 + 3);
  const char* before = withPayload.data();
  appendInlinePayload(withPayload, "abc", 3);
  EXPECT_EQ(withPayload.data(), before);  // appended in place
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

TEST(HeaderCodec, RoundTripsAutogradFieldsAndRejectsEveryTruncation) {
  Header h;
  h.function = "f";
  h.hasAutograd = true;
  h.autogradContext = (int64_t{3} << 48) | 17;
  h.autogradSendId = 5;
  h.requiresGrad = {true, false, false, true, true, false, true, false, true, true};
  std::string bytes = encodeHeader(h);
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_TRUE(out.hasAutograd);
  EXPECT_FALSE(out.hasRRef);
  EXPECT_EQ(out.autogradContext, h.autogradContext);
  EXPECT_EQ(out.autogradSendId, 5);
  EXPECT_EQ(out.requiresGrad, h.requiresGrad);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Header cut;
    EXPECT_NE(decodeHeader(bytes.data(), n, cut), "") << "length " << n;
  }
  // A count beyond the limit is refused before anything is allocated for it.
  std::string huge = bytes;
  const size_t countAt = bytes.size() - 2 - 4;  // 10 flags: 2 bytes of bits
  huge[countAt + 3] = '\x7f';
  EXPECT_NE(decodeHeader(huge.data(), huge.size(), out).find("autograd"), std::string::npos);
  // A header without the flag decodes with none of the fields.
  ASSERT_EQ(decodeHeader(encodeHeader(Header{}).data(), encodeHeader(Header{}).size(), out), "");
  EXPECT_FALSE(out.hasAutograd);
  EXPECT_TRUE(out.requiresGrad.empty());
}

TEST(HeaderCodec, InlinePayloadRoundTripsAfterEveryOptionalFieldAndRejectsLies) {
  Header h;
  h.function = "f";
  h.hasRRef = true;
  h.rref = {1, 2};
  h.hasAutograd = true;
  h.requiresGrad = {true, false, true};
  const std::string payload("\xF5\x01payload\0bytes", 16);
  std::string bytes = encodeHeader(h);
  Header plain;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), plain), "");
  EXPECT_FALSE(plain.inlinePayload);
  appendInlinePayload(bytes, payload.data(), payload.size());
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  ASSERT_TRUE(out.inlinePayload);
  EXPECT_EQ(std::string(bytes.data() + out.payloadOffset, out.payloadLength), payload);
  EXPECT_EQ(out.rref, h.rref);
  EXPECT_EQ(out.requiresGrad, h.requiresGrad);
  for (size_t n = 0; n < bytes.size(); ++n) {  // a truncated payload included
    Header cut;
    EXPECT_NE(decodeHeader(bytes.data(), n, cut), "") << "length " << n;
  }
  // A length over the limit is refused before the bytes are looked at.
  std::string huge = encodeHeader(Header{});
  appendInlinePayload(huge, "", 0);
  const uint32_t tooLong = kMaxInlinePayload + 1;
  huge.replace(huge.size() - sizeof(tooLong), sizeof(tooLong),
               reinterpret_cast<const char*>(&tooLong), sizeof(tooLong));
  huge.append(tooLong, 'x');
  Header refused;
  EXPECT_EQ(decodeHeader(huge.data(), huge.size(), refused), "inline payload too long");
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

TEST(FastValueCodec, RoundTripsAndRejectsEveryTruncation) {
  std::vector<char> bytes;
  FastEncoder e(bytes);
  e.tuple(5);
  e.integer(-7);
  e.real(2.5);
  e.string("abc", 3);
  int64_t sizes[] = {2};
  float data[] = {1.0f, 2.0f};
  e.tensorInline(6, sizes, 1, data, sizeof(data));
  e.tensorRef(0);
  FastValue v;
  ASSERT_EQ(decodeFastValue(bytes.data(), bytes.size(), 1, v), "");
  ASSERT_EQ(v.tag, FastTag::kTuple);
  ASSERT_EQ(v.items.size(), 5u);
  EXPECT_EQ(v.items[0].i, -7);
  EXPECT_EQ(v.items[1].d, 2.5);
  EXPECT_EQ(std::string(bytes.data() + v.items[2].offset, v.items[2].length), "abc");
  EXPECT_EQ(v.items[3].sizes, std::vector<int64_t>{2});
  EXPECT_EQ(v.items[3].length, sizeof(data));
  EXPECT_EQ(v.items[4].index, 0u);
  // The reference needs a table entry; every truncation is an error.
  EXPECT_NE(decodeFastValue(bytes.data(), bytes.size(), 0, v), "");
  for (size_t n = 0; n < bytes.size(); ++n) {
    FastValue t;
    EXPECT_NE(decodeFastValue(bytes.data(), n, 1, t), "") << n;
  }
}

TEST(FastValueCodec, AValueDecodedBeforeTakesTheNextWithoutItsItems) {
  // decodeValue decodes every message into one scratch value per thread: a
  // shorter tuple, a tuple after a failed decode, or a scalar must not see the
  // items the last message left there.
  std::vector<char> three;
  FastEncoder a(three);
  a.tuple(3);
  a.integer(1);
  a.integer(2);
  a.integer(3);
  std::vector<char> one;
  FastEncoder b(one);
  b.tuple(1);
  b.real(4.5);
  std::vector<char> scalar;
  FastEncoder c(scalar);
  c.integer(9);
  FastValue v;
  ASSERT_EQ(decodeFastValue(three.data(), three.size(), 0, v), "");
  ASSERT_EQ(v.items.size(), 3u);
  ASSERT_EQ(decodeFastValue(one.data(), one.size(), 0, v), "");
  ASSERT_EQ(v.tag, FastTag::kTuple);
  ASSERT_EQ(v.items.size(), 1u);
  EXPECT_EQ(v.items[0].tag, FastTag::kDouble);
  EXPECT_EQ(v.items[0].d, 4.5);
  EXPECT_NE(decodeFastValue(three.data(), three.size() - 1, 0, v), "");  // truncated
  ASSERT_EQ(decodeFastValue(one.data(), one.size(), 0, v), "");
  ASSERT_EQ(v.items.size(), 1u);
  EXPECT_EQ(v.items[0].d, 4.5);
  ASSERT_EQ(decodeFastValue(scalar.data(), scalar.size(), 0, v), "");
  EXPECT_EQ(v.tag, FastTag::kInt);
  EXPECT_EQ(v.i, 9);
}

TEST(FastValueCodec, RejectsLiesAboutShapesCountsAndDepth) {
  std::vector<char> bytes;
  FastEncoder e(bytes);
  int64_t sizes[] = {3};
  float data[] = {1.0f, 2.0f};
  e.tensorInline(6, sizes, 1, data, sizeof(data));  // 3 floats claimed, 2 sent
  FastValue v;
  EXPECT_NE(decodeFastValue(bytes.data(), bytes.size(), 0, v), "");
  bytes.clear();
  FastEncoder huge(bytes);
  huge.tuple(0xffffffffu);
  EXPECT_NE(decodeFastValue(bytes.data(), bytes.size(), 0, v), "");
  bytes.clear();
  FastEncoder deep(bytes);
  for (int i = 0; i < 100; ++i) deep.tuple(1);
  deep.none();
  EXPECT_NE(decodeFastValue(bytes.data(), bytes.size(), 0, v), "");
  bytes.clear();
  FastEncoder badDtype(bytes);
  badDtype.tensorInline(12, sizes, 1, data, 3);  // qint8 is not carried
  EXPECT_NE(decodeFastValue(bytes.data(), bytes.size(), 0, v), "");
}

}  // namespace
}  // namespace rpcjob::wire

namespace {
// The order field of a pipe with a lane: encoded, appended later, before an
// inline payload, and refused by nothing that knows it.
TEST(HeaderCodecOrder, RoundTripsAndAppends) {
  using namespace rpcjob::wire;
  Header h;
  h.type = MessageType::kCall;
  h.function = "f";
  h.hasOrder = true;
  h.orderBefore = 0x0102030405060708ull;
  Header out;
  std::string bytes = encodeHeader(h);
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_TRUE(out.hasOrder);
  EXPECT_EQ(out.orderBefore, h.orderBefore);
  EXPECT_EQ(bytes.size(), encodedHeaderSize(h));

  h.hasOrder = false;
  bytes = encodeHeader(h);
  appendOrder(bytes, 42);
  appendInlinePayload(bytes, "abc", 3);
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_TRUE(out.hasOrder);
  EXPECT_EQ(out.orderBefore, 42u);
  ASSERT_TRUE(out.inlinePayload);
  EXPECT_EQ(std::string(bytes.data() + out.payloadOffset, out.payloadLength), "abc");
  // Truncated inside the order field: an error, not a read past the end.
  bytes = encodeHeader(h);
  appendOrder(bytes, 7);
  bytes.resize(bytes.size() - 3);
  EXPECT_NE(decodeHeader(bytes.data(), bytes.size(), out), "");
}
}  // namespace

namespace {
using namespace rpcjob::wire;

// Bytes of every value, zeros included, as a lane frame's device handles are.
std::string handlesBytes(size_t n) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 37) & 0xff);
  return out;
}

void replaceLength(std::string& bytes, size_t at, uint32_t length) {
  bytes.replace(at, sizeof(length), reinterpret_cast<const char*>(&length), sizeof(length));
}

// The CUDA tensors of a lane frame (kDeviceHandles): after the order and the
// inline payload, last.
TEST(HeaderCodecDeviceHandles, FollowOrderAndInlinePayload) {
  Header h;
  h.type = MessageType::kCall;
  h.id = 99;
  h.function = "f";
  h.hasAutograd = true;
  h.requiresGrad = {true, false};
  const std::string payload("pay\0load", 8);
  const std::string handles = handlesBytes(300);
  std::string bytes = encodeHeader(h);
  appendOrder(bytes, 12);
  appendInlinePayload(bytes, payload.data(), payload.size());
  appendDeviceHandles(bytes, handles.data(), handles.size());
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out.id, 99u);
  EXPECT_EQ(out.requiresGrad, h.requiresGrad);
  EXPECT_TRUE(out.hasOrder);
  EXPECT_EQ(out.orderBefore, 12u);
  ASSERT_TRUE(out.inlinePayload);
  EXPECT_EQ(std::string(bytes.data() + out.payloadOffset, out.payloadLength), payload);
  ASSERT_TRUE(out.deviceHandles);
  EXPECT_EQ(out.handlesLength, handles.size());
  EXPECT_EQ(out.handlesOffset + out.handlesLength, bytes.size());  // last
  EXPECT_EQ(std::string(bytes.data() + out.handlesOffset, out.handlesLength), handles);
  for (size_t n = 0; n < bytes.size(); ++n) {  // truncated handles included
    Header cut;
    EXPECT_NE(decodeHeader(bytes.data(), n, cut), "") << "length " << n;
  }
}

TEST(HeaderCodecDeviceHandles, WithoutInlinePayload) {
  Header h;
  h.function = "g";
  const std::string handles = handlesBytes(64);
  std::string bytes = encodeHeader(h);
  const size_t headerSize = bytes.size();
  appendDeviceHandles(bytes, handles.data(), handles.size());
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_FALSE(out.inlinePayload);
  EXPECT_EQ(out.payloadLength, 0u);
  ASSERT_TRUE(out.deviceHandles);
  EXPECT_EQ(out.handlesOffset, headerSize + 4);
  EXPECT_EQ(std::string(bytes.data() + out.handlesOffset, out.handlesLength), handles);
  // None at all: the flag, an empty span.
  bytes = encodeHeader(h);
  appendDeviceHandles(bytes, "", 0);
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_TRUE(out.deviceHandles);
  EXPECT_EQ(out.handlesLength, 0u);
}

TEST(HeaderCodecDeviceHandles, RefusesTooLongAndTruncated) {
  const std::string most = handlesBytes(kMaxDeviceHandles);
  std::string bytes = encodeHeader(Header{});
  appendDeviceHandles(bytes, most.data(), most.size());
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out.handlesLength, kMaxDeviceHandles);
  // One byte more is refused before the bytes are looked at.
  const size_t lengthAt = encodeHeader(Header{}).size();
  replaceLength(bytes, lengthAt, kMaxDeviceHandles + 1);
  bytes.push_back('x');
  EXPECT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "device handles too long");
  replaceLength(bytes, lengthAt, UINT32_MAX);
  EXPECT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "device handles too long");
  // A length past the end of the header.
  bytes = encodeHeader(Header{});
  appendDeviceHandles(bytes, "abcdefghij", 10);
  bytes.pop_back();
  EXPECT_NE(decodeHeader(bytes.data(), bytes.size(), out).find("truncated"), std::string::npos);
  // The flag without its length.
  bytes = encodeHeader(Header{});
  bytes[5] = static_cast<char>(bytes[5] | kDeviceHandles);
  EXPECT_NE(decodeHeader(bytes.data(), bytes.size(), out), "");
}

TEST(HeaderCodecDeviceHandles, AHeaderWithoutThemSaysSo) {
  std::string bytes = encodeHeader(Header{});
  appendDeviceHandles(bytes, "abc", 3);
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  ASSERT_TRUE(out.deviceHandles);
  // The same Header decoded again from a message without them: reset.
  Header h;
  h.function = "plain";
  bytes = encodeHeader(h);
  appendInlinePayload(bytes, "p", 1);
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_FALSE(out.deviceHandles);
  EXPECT_EQ(out.handlesOffset, 0u);
  EXPECT_EQ(out.handlesLength, 0u);
  // The flag after kDeviceHandles is still unknown.
  bytes = encodeHeader(Header{});
  bytes[5] = static_cast<char>(bytes[5] | (kDeviceHandles << 1));
  EXPECT_NE(decodeHeader(bytes.data(), bytes.size(), out).find("unknown flags"), std::string::npos);
}

TEST(HeaderCodecDeviceHandles, LaneCopiedIsATypeAfterLaneStart) {
  static_assert(static_cast<uint8_t>(MessageType::kLaneCopied) ==
                static_cast<uint8_t>(MessageType::kLaneStart) + 1);
  EXPECT_FALSE(expectsAnswer(MessageType::kLaneCopied));
  Header h;
  h.type = MessageType::kLaneCopied;
  h.id = 7;  // the handoff
  std::string bytes = encodeHeader(h);
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out.type, MessageType::kLaneCopied);
  EXPECT_EQ(out.id, 7u);
}

TEST(HeaderCodecDeviceHandles, LaneOffersIsTheLastType) {
  static_assert(static_cast<uint8_t>(MessageType::kLaneOffers) ==
                static_cast<uint8_t>(MessageType::kLaneCopied) + 1);
  static_assert(MessageType::kLast == MessageType::kLaneOffers);
  EXPECT_FALSE(expectsAnswer(MessageType::kLaneOffers));
  Header h;
  h.type = MessageType::kLaneOffers;
  std::string bytes = encodeHeader(h);
  Header out;
  ASSERT_EQ(decodeHeader(bytes.data(), bytes.size(), out), "");
  EXPECT_EQ(out.type, MessageType::kLaneOffers);
  bytes[3] = static_cast<char>(static_cast<uint8_t>(MessageType::kLaneOffers) + 1);
  EXPECT_NE(decodeHeader(bytes.data(), bytes.size(), out).find("unknown message type"),
            std::string::npos);
}
}  // namespace
