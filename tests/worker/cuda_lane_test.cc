// The pure parts of CUDA tensors carried as IPC handles in lane frames
// (worker/src/cuda_lane/): the handles' wire format, the receiver's answer and
// its landing offers, the sender's handoffs, the bookkeeping of landing offers
// at both ends, which device pairs may take the lane, and the lane offer's
// fields that say the server takes them and the client takes landing offers.
// No CUDA: the handles are opaque bytes here.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda/nvlink_descriptor.h"
#include "cuda_lane/handles_wire.h"
#include "cuda_lane/handoffs.h"
#include "cuda_lane/landing_offers.h"
#include "cuda_lane/lane_pairs.h"
#include "header_codec.h"
#include "lane/lane.h"

namespace {

using rpcjob::wire::decodeLandingOffers;
using rpcjob::wire::decodeLaneCopied;
using rpcjob::wire::decodeLaneTensors;
using rpcjob::wire::encodeLandingOffers;
using rpcjob::wire::encodeLaneCopied;
using rpcjob::wire::encodeLaneTensors;
using rpcjob::wire::IpcHandle;
using rpcjob::wire::kMaxLaneTensors;
using rpcjob::wire::LaneCopied;
using rpcjob::wire::LaneTensor;
using rpcjob::wire::LaneTensors;
using rpcjob::wire::TensorMeta;

constexpr int8_t kFloat = 6, kLong = 4, kByte = 0, kDouble = 7;

// Bytes of every value, zeros included (a handle is no C string).
IpcHandle handle(int seed) {
  IpcHandle h;
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<char>((seed * 131 + i * 37) & 0xff);
  h[0] = 0;
  h[h.size() / 2] = 0;
  h[h.size() - 1] = static_cast<char>(0xff);
  return h;
}

// The fast path's element sizes: 0 for dtypes it does not carry (qint8: 12).
size_t elementSize(int8_t dtype) {
  return rpcjob::wire::fastElementSize(dtype);
}

LaneTensor tensor(int8_t dtype, std::vector<int64_t> sizes, uint64_t length, int seed) {
  LaneTensor t;
  t.meta.dtype = dtype;
  t.meta.deviceType = 1;
  t.meta.deviceIndex = static_cast<int8_t>(seed % 8);
  t.meta.sizes = std::move(sizes);
  t.pid = 1000 + seed;
  t.device = seed % 4;
  t.base = 0x7f0000000000ull + static_cast<uint64_t>(seed) * 0x100000;
  t.bufferId = 0x8000000000000000ull | static_cast<uint64_t>(seed);
  t.offset = static_cast<uint64_t>(seed) * 512;
  t.length = length;
  t.memory = handle(seed);
  t.ready = handle(seed + 100);
  return t;
}

LaneTensors sample() {
  LaneTensors in;
  in.handoff = 0x0102030405060708ull;
  in.tensors.push_back(tensor(kFloat, {2, 3}, 24, 1));
  in.tensors.push_back(tensor(kLong, {5}, 40, 2));
  in.tensors.push_back(tensor(kByte, {}, 1, 3));        // a scalar: one element
  in.tensors.push_back(tensor(kDouble, {0, 4}, 0, 4));  // no elements, no bytes
  return in;
}

// One tensor, encoded; `edit` spoils it first.
template <typename Edit>
std::string oneTensor(Edit edit) {
  LaneTensors in;
  in.handoff = 9;
  in.tensors.push_back(tensor(kFloat, {2, 3}, 24, 1));
  edit(in.tensors[0]);
  return encodeLaneTensors(in);
}

std::string decodeWith(const std::string& bytes, size_t (*size)(int8_t) = elementSize) {
  LaneTensors out;
  return decodeLaneTensors(bytes.data(), bytes.size(), out, size);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void expectSame(const LaneTensor& a, const LaneTensor& b) {
  EXPECT_EQ(a.meta.dtype, b.meta.dtype);
  EXPECT_EQ(a.meta.deviceType, b.meta.deviceType);
  EXPECT_EQ(a.meta.deviceIndex, b.meta.deviceIndex);
  EXPECT_EQ(a.meta.sizes, b.meta.sizes);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.base, b.base);
  EXPECT_EQ(a.bufferId, b.bufferId);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.memory, b.memory);
  EXPECT_EQ(a.ready, b.ready);
  EXPECT_EQ(a.offer, b.offer);
}

// ---- handles

TEST(LaneHandlesWire, RoundTripsEveryField) {
  const LaneTensors in = sample();
  const std::string bytes = encodeLaneTensors(in);
  LaneTensors out;
  out.tensors.push_back(tensor(kFloat, {1}, 4, 9));  // a previous decode's: replaced
  ASSERT_EQ(decodeLaneTensors(bytes.data(), bytes.size(), out, elementSize), "");
  EXPECT_EQ(out.handoff, in.handoff);
  ASSERT_EQ(out.tensors.size(), in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) expectSame(out.tensors[i], in.tensors[i]);
  // Canonical: what decodes re-encodes to the same bytes.
  EXPECT_EQ(encodeLaneTensors(out), bytes);
}

TEST(LaneHandlesWire, LayoutIsTheHeadersLittleEndianFixedWidth) {
  LaneTensors in;
  in.handoff = 0x1122334455667788ull;
  in.tensors.push_back(tensor(kFloat, {2, 3}, 24, 1));
  const std::string bytes = encodeLaneTensors(in);
  const std::string meta = rpcjob::wire::encodeTensorMeta(in.tensors[0].meta);
  ASSERT_EQ(bytes.size(), 1 + 8 + 4 + 4 + meta.size() + 4 + 4 + 4 * 8 + 2 * 64);
  EXPECT_EQ(bytes[0], 1);                                       // version
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 0x88);              // handoff, low byte first
  EXPECT_EQ(static_cast<uint8_t>(bytes[8]), 0x11);              //
  EXPECT_EQ(bytes.substr(9, 4), std::string("\x01\0\0\0", 4));  // count
  uint32_t metaLength = 0;
  std::memcpy(&metaLength, bytes.data() + 13, 4);
  EXPECT_EQ(metaLength, meta.size());
  EXPECT_EQ(bytes.substr(17, meta.size()), meta);
  int32_t pid = 0;
  std::memcpy(&pid, bytes.data() + 17 + meta.size(), 4);
  EXPECT_EQ(pid, 1001);
  const IpcHandle ready = in.tensors[0].ready;
  EXPECT_EQ(bytes.substr(bytes.size() - 64), std::string(ready.data(), ready.size()));
}

TEST(LaneHandlesWire, EveryPrefixIsAnError) {
  const std::string bytes = encodeLaneTensors(sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    LaneTensors out;
    EXPECT_NE(decodeLaneTensors(bytes.data(), n, out, elementSize), "") << "length " << n;
    EXPECT_NE(decodeLaneTensors(bytes.data(), n, out, nullptr), "") << "length " << n;
  }
  // In a buffer of exactly that size, so a sanitizer sees any read past it.
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<char> exact(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    LaneTensors out;
    EXPECT_NE(decodeLaneTensors(exact.data(), exact.size(), out, elementSize), "");
  }
}

TEST(LaneHandlesWire, RefusesATrailingByte) {
  std::string bytes = encodeLaneTensors(sample());
  bytes.push_back('\0');
  EXPECT_TRUE(contains(decodeWith(bytes), "trailing")) << decodeWith(bytes);
}

// A frame with pushed tensors or offers given back: version 2, each tensor's
// offer id after its handles, the ids given back at the end.
LaneTensors pushedSample() {
  LaneTensors in = sample();
  in.tensors[0].offer = 0x0a0b0c0d0e0f1011ull;
  in.tensors[2].offer = 3;
  in.returned = {7, 0x8000000000000001ull};
  return in;
}

TEST(LaneHandlesWire, PushedTensorsAndReturnedOffersRoundTripAsVersionTwo) {
  const LaneTensors in = pushedSample();
  const std::string bytes = encodeLaneTensors(in);
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(bytes.size(), encodeLaneTensors(sample()).size() + 8 * in.tensors.size() + 4 + 8 * 2);
  LaneTensors out;
  out.returned = {99};  // a previous decode's: replaced
  ASSERT_EQ(decodeLaneTensors(bytes.data(), bytes.size(), out, elementSize), "");
  ASSERT_EQ(out.tensors.size(), in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) expectSame(out.tensors[i], in.tensors[i]);
  EXPECT_EQ(out.returned, in.returned);
  EXPECT_EQ(encodeLaneTensors(out), bytes);
  // Only offers given back: version 2 too; neither: version 1, as before offers.
  LaneTensors returnedOnly = sample();
  returnedOnly.returned = {4};
  EXPECT_EQ(encodeLaneTensors(returnedOnly)[0], 2);
  ASSERT_EQ(decodeLaneTensors(bytes.data(), bytes.size(), out, elementSize), "");
  const std::string v1 = encodeLaneTensors(sample());
  ASSERT_EQ(decodeLaneTensors(v1.data(), v1.size(), out, elementSize), "");
  EXPECT_TRUE(out.returned.empty());
  for (const LaneTensor& t : out.tensors) EXPECT_EQ(t.offer, 0u);
}

TEST(LaneHandlesWire, VersionTwoEveryPrefixIsAnError) {
  const std::string bytes = encodeLaneTensors(pushedSample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<char> exact(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    LaneTensors out;
    EXPECT_NE(decodeLaneTensors(exact.data(), exact.size(), out, elementSize), "")
        << "length " << n;
  }
}

TEST(LaneHandlesWire, VersionTwoRefusesBadReturnedOffers) {
  LaneTensors in = pushedSample();
  in.returned = {5, 0};
  EXPECT_TRUE(contains(decodeWith(encodeLaneTensors(in)), "offer of id 0"));
  in.returned.assign(kMaxLaneTensors + 1, 6);
  EXPECT_TRUE(contains(decodeWith(encodeLaneTensors(in)), "returning"));
  in.returned.assign(kMaxLaneTensors, 6);
  EXPECT_EQ(decodeWith(encodeLaneTensors(in)), "");
  // A count the bytes cannot hold.
  in.returned = {5};
  std::string bytes = encodeLaneTensors(in);
  const uint32_t lie = 1000;
  std::memcpy(&bytes[bytes.size() - 12], &lie, 4);
  EXPECT_TRUE(contains(decodeWith(bytes), "returning 1000 offers in 8 bytes")) << decodeWith(bytes);
  bytes = encodeLaneTensors(in);
  bytes.push_back('\0');
  EXPECT_TRUE(contains(decodeWith(bytes), "trailing"));
  // Version 3 is no version.
  bytes = encodeLaneTensors(in);
  bytes[0] = 3;
  EXPECT_TRUE(contains(decodeWith(bytes), "version 3"));
}

TEST(LaneHandlesWire, RefusesAnotherVersion) {
  std::string bytes = encodeLaneTensors(sample());
  for (char v : {'\0', '\3', '\xff'}) {
    bytes[0] = v;
    EXPECT_TRUE(contains(decodeWith(bytes), "version")) << decodeWith(bytes);
  }
  bytes[0] = 2;  // a version 1 body read as version 2: its fields do not line up
  EXPECT_NE(decodeWith(bytes), "");
}

TEST(LaneHandlesWire, RefusesAHandoffOfZero) {
  LaneTensors in = sample();
  in.handoff = 0;
  const std::string why = decodeWith(encodeLaneTensors(in));
  EXPECT_TRUE(contains(why, "handoff of 0")) << why;
}

TEST(LaneHandlesWire, RefusesNoTensors) {
  LaneTensors in;
  in.handoff = 1;
  const std::string bytes = encodeLaneTensors(in);
  EXPECT_EQ(bytes.size(), 1u + 8 + 4);
  EXPECT_TRUE(contains(decodeWith(bytes), "without tensors")) << decodeWith(bytes);
}

TEST(LaneHandlesWire, TakesTheMostTensorsAndNoMore) {
  LaneTensors in;
  in.handoff = 5;
  for (size_t i = 0; i < kMaxLaneTensors; ++i) {
    in.tensors.push_back(tensor(kFloat, {2}, 8, static_cast<int>(i)));
  }
  std::string bytes = encodeLaneTensors(in);
  LaneTensors out;
  ASSERT_EQ(decodeLaneTensors(bytes.data(), bytes.size(), out, elementSize), "");
  EXPECT_EQ(out.tensors.size(), kMaxLaneTensors);
  // One more, all its bytes present: refused for its count.
  in.tensors.push_back(tensor(kFloat, {2}, 8, 7));
  bytes = encodeLaneTensors(in);
  EXPECT_TRUE(contains(decodeWith(bytes), "more than 256")) << decodeWith(bytes);
}

TEST(LaneHandlesWire, RefusesACountTheBytesCannotHold) {
  // kMaxLaneTensors + 1 claimed, one tensor's bytes present.
  std::string bytes = oneTensor([](LaneTensor&) {});
  const uint32_t tooMany = kMaxLaneTensors + 1;
  std::memcpy(&bytes[9], &tooMany, 4);
  EXPECT_TRUE(contains(decodeWith(bytes), "more than")) << decodeWith(bytes);
  // Within the limit, but more than the bytes can hold: refused before any
  // tensor is read or reserved for.
  for (uint32_t claimed : {2u, 100u, static_cast<uint32_t>(kMaxLaneTensors)}) {
    std::memcpy(&bytes[9], &claimed, 4);
    const std::string why = decodeWith(bytes);
    EXPECT_TRUE(contains(why, std::to_string(claimed) + " tensors in")) << why;
  }
  // The largest count a u32 holds.
  const uint32_t most = UINT32_MAX;
  std::memcpy(&bytes[9], &most, 4);
  EXPECT_NE(decodeWith(bytes), "");
}

TEST(LaneHandlesWire, RefusesMetadataThatDoesNotDecode) {
  // Byte 17 is the metadata's version; 13..16 its length.
  std::string bytes = oneTensor([](LaneTensor&) {});
  bytes[17] = 9;
  EXPECT_TRUE(contains(decodeWith(bytes), "lane tensor 0: unsupported tensor metadata version"))
      << decodeWith(bytes);
  // A metadata length one short: the metadata is cut, what follows shifts.
  bytes = oneTensor([](LaneTensor&) {});
  uint32_t metaLength = 0;
  std::memcpy(&metaLength, &bytes[13], 4);
  const uint32_t shorter = metaLength - 1;
  std::memcpy(&bytes[13], &shorter, 4);
  EXPECT_TRUE(contains(decodeWith(bytes), "lane tensor 0:")) << decodeWith(bytes);
  // A length past the end.
  const uint32_t huge = UINT32_MAX;
  std::memcpy(&bytes[13], &huge, 4);
  EXPECT_TRUE(contains(decodeWith(bytes), "truncated")) << decodeWith(bytes);
  // Metadata the codec refuses: a negative size, a CUDA device without index,
  // an unknown device type.
  EXPECT_TRUE(contains(decodeWith(oneTensor([](LaneTensor& t) {
                         t.meta.sizes = {-1, 2};
                       })),
                       "bad tensor shape"));
  EXPECT_TRUE(contains(decodeWith(oneTensor([](LaneTensor& t) { t.meta.deviceIndex = -1; })),
                       "bad cuda device index"));
  EXPECT_TRUE(contains(decodeWith(oneTensor([](LaneTensor& t) { t.meta.deviceType = 2; })),
                       "unknown device type"));
}

TEST(LaneHandlesWire, RefusesATensorNotOnACudaDevice) {
  const std::string why = decodeWith(oneTensor([](LaneTensor& t) {
    t.meta.deviceType = 0;
    t.meta.deviceIndex = -1;
  }));
  EXPECT_TRUE(contains(why, "not on a CUDA device")) << why;
}

TEST(LaneHandlesWire, RefusesAPidThatIsNotPositive) {
  for (int32_t pid : {0, -1, INT32_MIN}) {
    const std::string why = decodeWith(oneTensor([pid](LaneTensor& t) { t.pid = pid; }));
    EXPECT_TRUE(contains(why, "pid")) << why;
  }
  EXPECT_EQ(decodeWith(oneTensor([](LaneTensor& t) { t.pid = INT32_MAX; })), "");
}

TEST(LaneHandlesWire, RefusesANegativeDevice) {
  for (int32_t device : {-1, INT32_MIN}) {
    const std::string why = decodeWith(oneTensor([device](LaneTensor& t) { t.device = device; }));
    EXPECT_TRUE(contains(why, "device")) << why;
  }
  EXPECT_EQ(decodeWith(oneTensor([](LaneTensor& t) { t.device = 0; })), "");
}

TEST(LaneHandlesWire, RefusesAnOffsetAndLengthThatOverflow) {
  auto spoil = [](uint64_t offset, uint64_t length) {
    return oneTensor([=](LaneTensor& t) {
      t.meta.dtype = kByte;
      t.meta.sizes = {};  // checked without a shape: elementSize is null below
      t.offset = offset;
      t.length = length;
    });
  };
  EXPECT_TRUE(contains(decodeWith(spoil(UINT64_MAX, 1), nullptr), "overflows"));
  EXPECT_TRUE(contains(decodeWith(spoil(1, UINT64_MAX), nullptr), "overflows"));
  EXPECT_TRUE(
      contains(decodeWith(spoil(UINT64_MAX / 2 + 1, UINT64_MAX / 2 + 1), nullptr), "overflows"));
  EXPECT_EQ(decodeWith(spoil(UINT64_MAX - 1, 1), nullptr), "");  // ends at the last byte
  EXPECT_EQ(decodeWith(spoil(UINT64_MAX, 0), nullptr), "");
}

TEST(LaneHandlesWire, ChecksTheLengthAgainstTheShapeWhenItKnowsTheDtype) {
  for (uint64_t length : {uint64_t{0}, uint64_t{23}, uint64_t{25}, uint64_t{6}}) {
    const std::string bytes = oneTensor([=](LaneTensor& t) { t.length = length; });
    const std::string why = decodeWith(bytes);
    EXPECT_TRUE(contains(why, std::to_string(length) + " bytes for 6 elements of 4 bytes")) << why;
    // Without a size function the caller checks it: accepted here.
    EXPECT_EQ(decodeWith(bytes, nullptr), "");
  }
  // 2^62 elements of 8 bytes: the product overflows, refused rather than wrapped.
  const std::string huge = oneTensor([](LaneTensor& t) {
    t.meta.dtype = kDouble;
    t.meta.sizes = {int64_t{1} << 31, int64_t{1} << 31};
    t.length = 0;
  });
  EXPECT_TRUE(contains(decodeWith(huge), "bytes for")) << decodeWith(huge);
}

TEST(LaneHandlesWire, RefusesADtypeTheCallerDoesNotKnow) {
  const std::string bytes = oneTensor([](LaneTensor& t) {
    t.meta.dtype = 12;  // qint8: no fast element size
    t.length = 6;
  });
  const std::string why = decodeWith(bytes);
  EXPECT_TRUE(contains(why, "dtype 12")) << why;
  EXPECT_EQ(decodeWith(bytes, nullptr), "");
  // A later tensor's error names that tensor.
  LaneTensors in = sample();
  in.tensors[2].meta.dtype = 12;
  const std::string later = decodeWith(encodeLaneTensors(in));
  EXPECT_TRUE(contains(later, "lane tensor 2: dtype 12")) << later;
}

// ---- copied

TEST(LaneCopiedWire, RoundTrips) {
  for (size_t count : {size_t{1}, size_t{3}, kMaxLaneTensors}) {
    LaneCopied in;
    for (size_t i = 0; i < count; ++i) in.done.push_back(handle(static_cast<int>(i)));
    const std::string bytes = encodeLaneCopied(in);
    EXPECT_EQ(bytes.size(), 1 + 4 + 64 * count);
    EXPECT_EQ(bytes[0], 1);
    LaneCopied out;
    out.done.push_back(handle(77));  // a previous decode's: replaced
    ASSERT_EQ(decodeLaneCopied(bytes.data(), bytes.size(), out), "") << count;
    EXPECT_EQ(out.done, in.done);
    EXPECT_EQ(encodeLaneCopied(out), bytes);
  }
}

TEST(LaneCopiedWire, EveryPrefixIsAnError) {
  LaneCopied in;
  in.done = {handle(1), handle(2)};
  const std::string bytes = encodeLaneCopied(in);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<char> exact(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    LaneCopied out;
    EXPECT_NE(decodeLaneCopied(exact.data(), exact.size(), out), "") << "length " << n;
  }
}

TEST(LaneCopiedWire, RefusesLies) {
  LaneCopied in;
  in.done = {handle(1), handle(2)};
  const std::string good = encodeLaneCopied(in);
  auto decode = [](const std::string& bytes) {
    LaneCopied out;
    return decodeLaneCopied(bytes.data(), bytes.size(), out);
  };
  std::string bytes = good;
  bytes[0] = 2;
  EXPECT_TRUE(contains(decode(bytes), "version")) << decode(bytes);
  // No event: every tensor of the frame was pushed (landing offers).
  LaneCopied none;
  none.done.push_back(handle(5));  // a previous decode's: cleared
  const std::string empty = encodeLaneCopied(LaneCopied{});
  ASSERT_EQ(decodeLaneCopied(empty.data(), empty.size(), none), "");
  EXPECT_TRUE(none.done.empty());
  // A count over the limit, with and without the bytes for it.
  LaneCopied many;
  many.done.assign(kMaxLaneTensors + 1, handle(3));
  EXPECT_TRUE(contains(decode(encodeLaneCopied(many)), "more than"));
  bytes = good;
  const uint32_t tooMany = kMaxLaneTensors + 1;
  std::memcpy(&bytes[1], &tooMany, 4);
  EXPECT_TRUE(contains(decode(bytes), "more than")) << decode(bytes);
  const uint32_t most = UINT32_MAX;
  std::memcpy(&bytes[1], &most, 4);
  EXPECT_TRUE(contains(decode(bytes), "more than")) << decode(bytes);
  // A count the bytes do not match.
  bytes = good;
  const uint32_t three = 3;
  std::memcpy(&bytes[1], &three, 4);
  EXPECT_TRUE(contains(decode(bytes), "3 events in 128 bytes")) << decode(bytes);
  bytes = good;
  bytes.push_back('\0');
  EXPECT_TRUE(contains(decode(bytes), "trailing")) << decode(bytes);
}

// ---- landing offers on the wire

using rpcjob::wire::LandingOffer;

LandingOffer laneOffer(int seed) {
  LandingOffer o;
  o.id = 1 + static_cast<uint64_t>(seed);
  o.device = seed % 8;
  o.pid = 2000 + seed;
  o.base = 0x7e0000000000ull + static_cast<uint64_t>(seed) * 0x200000;
  o.bufferId = 0x4000000000000000ull | static_cast<uint64_t>(seed);
  o.offset = static_cast<uint64_t>(seed) * 4096;
  o.length = (uint64_t{1} << 20) + static_cast<uint64_t>(seed);
  o.memory = handle(seed + 50);
  return o;
}

void expectSame(const LandingOffer& a, const LandingOffer& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.pid, b.pid);
  EXPECT_EQ(a.base, b.base);
  EXPECT_EQ(a.bufferId, b.bufferId);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.memory, b.memory);
}

std::string decodeOffers(const std::string& bytes) {
  std::vector<LandingOffer> out;
  return decodeLandingOffers(bytes.data(), bytes.size(), out);
}

TEST(LandingOffersWire, RoundTrips) {
  for (size_t count : {size_t{1}, size_t{3}, kMaxLaneTensors}) {
    std::vector<LandingOffer> in;
    for (size_t i = 0; i < count; ++i) in.push_back(laneOffer(static_cast<int>(i)));
    const std::string bytes = encodeLandingOffers(in);
    EXPECT_EQ(bytes.size(), 1 + 4 + count * (8 + 4 + 4 + 4 * 8 + 64));
    EXPECT_EQ(bytes[0], 1);
    std::vector<LandingOffer> out = {laneOffer(99)};  // a previous decode's: replaced
    ASSERT_EQ(decodeLandingOffers(bytes.data(), bytes.size(), out), "") << count;
    ASSERT_EQ(out.size(), in.size());
    for (size_t i = 0; i < count; ++i) expectSame(out[i], in[i]);
    EXPECT_EQ(encodeLandingOffers(out), bytes);
  }
}

TEST(LandingOffersWire, EveryPrefixIsAnError) {
  const std::string bytes = encodeLandingOffers({laneOffer(1), laneOffer(2)});
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<char> exact(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<LandingOffer> out;
    EXPECT_NE(decodeLandingOffers(exact.data(), exact.size(), out), "") << "length " << n;
  }
}

TEST(LandingOffersWire, RefusesLies) {
  const std::string good = encodeLandingOffers({laneOffer(1), laneOffer(2)});
  std::string bytes = good;
  bytes[0] = 2;
  EXPECT_TRUE(contains(decodeOffers(bytes), "version 2")) << decodeOffers(bytes);
  EXPECT_TRUE(contains(decodeOffers(encodeLandingOffers({})), "without an offer"));
  std::vector<LandingOffer> many(kMaxLaneTensors + 1, laneOffer(3));
  EXPECT_TRUE(contains(decodeOffers(encodeLandingOffers(many)), "more than"));
  bytes = good;
  const uint32_t three = 3;
  std::memcpy(&bytes[1], &three, 4);
  EXPECT_TRUE(contains(decodeOffers(bytes), "3 buffers in")) << decodeOffers(bytes);
  bytes = good;
  bytes.push_back('\0');
  EXPECT_TRUE(contains(decodeOffers(bytes), "buffers in")) << decodeOffers(bytes);
  const std::vector<std::pair<void (*)(LandingOffer&), const char*>> edits = {
      {[](LandingOffer& o) { o.id = 0; }, "lane offer 1: an id of 0"},
      {[](LandingOffer& o) { o.length = 0; }, "lane offer 1: a length of 0"},
      {[](LandingOffer& o) { o.device = -1; }, "lane offer 1: a device of -1"},
      {[](LandingOffer& o) { o.pid = 0; }, "lane offer 1: a pid of 0"},
      {[](LandingOffer& o) { o.pid = -5; }, "lane offer 1: a pid of -5"},
      {[](LandingOffer& o) { o.offset = UINT64_MAX; }, "lane offer 1: offset + length overflows"},
  };
  for (const auto& [edit, why] : edits) {
    std::vector<LandingOffer> in = {laneOffer(1), laneOffer(2)};
    edit(in[1]);
    EXPECT_EQ(decodeOffers(encodeLandingOffers(in)), why);
  }
}

// ---- landing offers: the receiver's buffers, the sender's held offers

using rpcjob::runtime::cuda_lane::HeldOffers;
using rpcjob::runtime::cuda_lane::LandingSize;
using rpcjob::runtime::cuda_lane::OfferedBuffers;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(OfferedBuffers, WantsOneOfferPerLargeTensorNotYetOut) {
  OfferedBuffers<int> held(10 * kMiB);
  const std::vector<LandingSize> frame = {{1, 2 * kMiB}, {0, 3 * kMiB}, {1, 2 * kMiB}};
  EXPECT_EQ(held.wanted(frame), frame);  // a size listed twice: two
  const uint64_t a = held.add({1, 2 * kMiB}, 10);
  EXPECT_EQ(held.wanted(frame), (std::vector<LandingSize>{{0, 3 * kMiB}, {1, 2 * kMiB}}));
  held.add({1, 2 * kMiB}, 11);
  held.add({0, 3 * kMiB}, 12);
  EXPECT_TRUE(held.wanted(frame).empty());
  EXPECT_EQ(held.size(), 3u);
  EXPECT_EQ(held.bytes(), 7 * kMiB);
  std::string why;
  EXPECT_EQ(held.take(a, {1, 2 * kMiB}, why), 10);
  EXPECT_EQ(held.wanted(frame), (std::vector<LandingSize>{{1, 2 * kMiB}}));
}

TEST(OfferedBuffers, StaysWithinTheBudget) {
  OfferedBuffers<int> held(5 * kMiB);
  EXPECT_EQ(held.wanted({{0, 2 * kMiB}, {0, 2 * kMiB}, {0, 2 * kMiB}}),
            (std::vector<LandingSize>{{0, 2 * kMiB}, {0, 2 * kMiB}}));
  EXPECT_EQ(held.wanted({{0, 6 * kMiB}, {1, 5 * kMiB}}), (std::vector<LandingSize>{{1, 5 * kMiB}}));
  held.add({0, 4 * kMiB}, 1);
  EXPECT_EQ(held.wanted({{1, 2 * kMiB}, {1, kMiB}}), (std::vector<LandingSize>{{1, kMiB}}));
  EXPECT_TRUE(OfferedBuffers<int>(0).wanted({{0, kMiB}}).empty());  // budget 0: no offers
  EXPECT_TRUE(held.wanted({{0, 0}}).empty());
}

TEST(OfferedBuffers, TakesEachOfferOnceAtItsOwnSize) {
  OfferedBuffers<int> held(100 * kMiB);
  const uint64_t a = held.add({0, kMiB}, 1);
  const uint64_t b = held.add({1, kMiB}, 2);
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  std::string why;
  EXPECT_FALSE(held.take(b, {0, kMiB}, why));  // another device
  EXPECT_EQ(why,
            "a tensor of 1048576 bytes for cuda:0 pushed into landing offer 2 of 1048576 "
            "bytes on cuda:1");
  why.clear();
  EXPECT_FALSE(held.take(b, {1, kMiB + 1}, why));  // another length
  EXPECT_TRUE(contains(why, "1048577 bytes")) << why;
  EXPECT_EQ(held.size(), 2u);  // a refused take leaves the offer held
  EXPECT_EQ(held.take(b, {1, kMiB}, why), 2);
  why.clear();
  EXPECT_FALSE(held.take(b, {1, kMiB}, why));  // once
  EXPECT_EQ(why, "a tensor pushed into landing offer 2, not one held");
  EXPECT_FALSE(held.take(77, {1, kMiB}, why));  // never made
  EXPECT_EQ(held.add({0, kMiB}, 3), 3u);        // ids never reused
}

TEST(OfferedBuffers, GivesBackAndClosesWithTheirBytes) {
  OfferedBuffers<std::unique_ptr<int>> held(100 * kMiB);
  const uint64_t a = held.add({0, kMiB}, std::make_unique<int>(1));
  held.add({0, 2 * kMiB}, std::make_unique<int>(2));
  auto back = held.giveBack(a);
  ASSERT_TRUE(back);
  EXPECT_EQ(**back, 1);
  EXPECT_FALSE(held.giveBack(a));
  EXPECT_EQ(held.bytes(), 2 * kMiB);
  std::vector<std::unique_ptr<int>> rest = held.close();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(*rest[0], 2);
  EXPECT_EQ(held.size(), 0u);
  EXPECT_EQ(held.bytes(), 0u);
}

constexpr size_t kAll = SIZE_MAX;

TEST(HeldOffers, TakesTheOldestOfExactlyTheSize) {
  HeldOffers<int> held;
  held.add(1, {0, kMiB});
  held.add(2, {1, kMiB});
  held.add(3, {0, kMiB});
  EXPECT_FALSE(held.take({0, 2 * kMiB}));
  EXPECT_FALSE(held.take({2, kMiB}));
  EXPECT_EQ(held.take({0, kMiB}), 1);
  EXPECT_EQ(held.take({0, kMiB}), 3);
  EXPECT_FALSE(held.take({0, kMiB}));
  EXPECT_EQ(held.take({1, kMiB}), 2);
  EXPECT_EQ(held.size(), 0u);
}

TEST(HeldOffers, GivesBackWhatWentUnusedForSoManyFrames) {
  HeldOffers<int> held;
  held.add(1, {0, kMiB});
  for (uint64_t f = 1; f <= HeldOffers<int>::kUnusedFrames; ++f) {
    EXPECT_TRUE(held.age(kAll).empty()) << "frame " << f;
    if (f == 3) held.add(2, {0, 2 * kMiB});
  }
  EXPECT_EQ(held.age(kAll), std::vector<int>{1});
  for (int f = 0; f < 2; ++f) EXPECT_TRUE(held.age(kAll).empty());
  EXPECT_EQ(held.age(kAll), std::vector<int>{2});
  EXPECT_EQ(held.size(), 0u);
}

TEST(HeldOffers, GivesBackNoMoreThanOneFrameMayCarryTheRestNextTime) {
  HeldOffers<int> held;
  for (int i = 0; i < 5; ++i) held.add(i, {0, kMiB * (i + 1)});
  for (uint64_t f = 0; f < HeldOffers<int>::kUnusedFrames; ++f) held.age(2);
  EXPECT_EQ(held.age(2), (std::vector<int>{0, 1}));
  EXPECT_EQ(held.age(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(held.age(2), (std::vector<int>{4}));
  EXPECT_EQ(held.size(), 0u);
}

TEST(HeldOffers, AnOfferThatCannotBeUsedIsNeverTakenAndGoesBackNext) {
  HeldOffers<int> held;
  held.giveBackUnused(7, {0, kMiB});
  held.add(8, {0, kMiB});
  EXPECT_EQ(held.take({0, kMiB}), 8);  // not 7, though older
  EXPECT_FALSE(held.take({0, kMiB}));
  EXPECT_EQ(held.age(kAll), std::vector<int>{7});
  EXPECT_EQ(held.size(), 0u);
}

TEST(HeldOffers, ConcurrentAddsTakesAndCloseLoseNothing) {
  HeldOffers<int> held;
  constexpr int kEach = 2000;
  std::atomic<int> taken{0};
  std::thread adder([&] {
    for (int i = 1; i <= kEach; ++i) held.add(i, {i % 2, kMiB});
  });
  std::thread taker([&] {
    for (int i = 0; i < 4 * kEach; ++i) {
      if (held.take({i % 2, kMiB})) taken++;
    }
  });
  adder.join();
  taker.join();
  EXPECT_EQ(taken.load() + static_cast<int>(held.close().size()), kEach);
  EXPECT_EQ(held.size(), 0u);
}

TEST(Quarantine, HoldsBuffersUntilTheirProcessIsGone) {
  rpcjob::runtime::cuda_lane::Quarantine<std::unique_ptr<int>> q;
  std::set<int64_t> alive = {10, 20};
  const auto isAlive = [&](int64_t pid) { return alive.count(pid) > 0; };
  std::vector<std::unique_ptr<int>> first;
  first.push_back(std::make_unique<int>(1));
  first.push_back(std::make_unique<int>(2));
  EXPECT_TRUE(q.keep(10, std::move(first), isAlive).empty());
  std::vector<std::unique_ptr<int>> second;
  second.push_back(std::make_unique<int>(3));
  EXPECT_TRUE(q.keep(20, std::move(second), isAlive).empty());
  EXPECT_EQ(q.size(), 3u);
  // Pid 10 is gone: its two come back at the next keep, pid 20's stays.
  alive.erase(10);
  std::vector<std::unique_ptr<int>> gone = q.keep(20, {}, isAlive);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(*gone[0] + *gone[1], 3);
  EXPECT_EQ(q.size(), 1u);
  // A process already gone when its lane ends: nothing is held for it.
  std::vector<std::unique_ptr<int>> late;
  late.push_back(std::make_unique<int>(4));
  gone = q.keep(30, std::move(late), isAlive);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(*gone[0], 4);
  EXPECT_EQ(q.size(), 1u);
}

// ---- handoffs

using rpcjob::runtime::cuda_lane::Handoffs;

TEST(Handoffs, IdsStartAtOneAndIncrease) {
  Handoffs<std::string> lent;
  EXPECT_EQ(lent.size(), 0u);
  uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    std::string value = "v" + std::to_string(i);
    const uint64_t id = lent.add(value);
    EXPECT_EQ(id, last + 1);
    last = id;
  }
  EXPECT_EQ(lent.size(), 5u);
  // Never reused: an id taken is not given again.
  ASSERT_TRUE(lent.take(5));
  std::string more = "more";
  EXPECT_EQ(lent.add(more), 6u);
}

TEST(Handoffs, TakesOnceAndNothingItNeverGave) {
  Handoffs<std::unique_ptr<int>> lent;  // move-only values
  auto a = std::make_unique<int>(1);
  auto b = std::make_unique<int>(2);
  const uint64_t ia = lent.add(a);
  const uint64_t ib = lent.add(b);
  EXPECT_TRUE(a == nullptr);  // kept, moved in
  auto taken = lent.take(ib);
  ASSERT_TRUE(taken && *taken);
  EXPECT_EQ(**taken, 2);
  EXPECT_FALSE(lent.take(ib));  // twice
  EXPECT_FALSE(lent.take(0));
  EXPECT_FALSE(lent.take(ib + 1));  // never given
  EXPECT_FALSE(lent.take(UINT64_MAX));
  EXPECT_EQ(lent.size(), 1u);
  auto first = lent.take(ia);
  ASSERT_TRUE(first && *first);
  EXPECT_EQ(**first, 1);
  EXPECT_EQ(lent.size(), 0u);
}

TEST(Handoffs, CloseReturnsTheRestAndLaterAddsLeaveTheValue) {
  Handoffs<std::unique_ptr<int>> lent;
  std::vector<uint64_t> ids;
  for (int i = 1; i <= 4; ++i) {
    auto v = std::make_unique<int>(i);
    ids.push_back(lent.add(v));
  }
  ASSERT_TRUE(lent.take(ids[1]));
  std::vector<std::unique_ptr<int>> rest = lent.close();
  std::vector<int> values;
  for (const auto& v : rest) values.push_back(*v);
  std::sort(values.begin(), values.end());
  EXPECT_EQ(values, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(lent.size(), 0u);
  EXPECT_FALSE(lent.take(ids[0]));  // the caller has it now
  // After close: 0, and the value stays with the caller.
  auto late = std::make_unique<int>(5);
  EXPECT_EQ(lent.add(late), 0u);
  ASSERT_TRUE(late != nullptr);
  EXPECT_EQ(*late, 5);
  EXPECT_EQ(lent.size(), 0u);
  EXPECT_TRUE(lent.close().empty());
}

// Adders and takers on several threads: every value is taken exactly once.
TEST(Handoffs, ConcurrentAddsAndTakesLoseNothing) {
  constexpr int kAdders = 4, kTakers = 3;
  constexpr uint64_t kEach = 20000;
  Handoffs<uint64_t> lent;
  std::mutex mu;
  std::vector<uint64_t> ready;  // ids added, not yet taken
  std::vector<uint64_t> allIds;
  std::atomic<int> addersLeft{kAdders};
  std::atomic<uint64_t> takenSum{0}, takenCount{0}, misses{0}, zeroIds{0};
  std::vector<std::thread> threads;
  for (int a = 0; a < kAdders; ++a) {
    threads.emplace_back([&, a] {
      for (uint64_t i = 0; i < kEach; ++i) {
        uint64_t value = a * kEach + i + 1;
        const uint64_t id = lent.add(value);
        if (id == 0) zeroIds++;
        std::lock_guard<std::mutex> lock(mu);
        ready.push_back(id);
        allIds.push_back(id);
      }
      addersLeft--;
    });
  }
  for (int t = 0; t < kTakers; ++t) {
    threads.emplace_back([&] {
      for (;;) {
        uint64_t id = 0;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (ready.empty()) {
            if (addersLeft.load() == 0) return;
          } else {
            id = ready.back();
            ready.pop_back();
          }
        }
        if (id == 0) {
          std::this_thread::yield();
          continue;
        }
        if (auto v = lent.take(id)) {
          takenSum += *v;
          takenCount++;
        } else {
          misses++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  const uint64_t total = kAdders * kEach;
  EXPECT_EQ(zeroIds.load(), 0u);
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_EQ(takenCount.load(), total);
  EXPECT_EQ(takenSum.load(), total * (total + 1) / 2);
  EXPECT_EQ(lent.size(), 0u);
  std::set<uint64_t> unique(allIds.begin(), allIds.end());
  EXPECT_EQ(unique.size(), total);
  EXPECT_EQ(*unique.begin(), 1u);
  EXPECT_EQ(*unique.rbegin(), total);
}

// The same with close() racing them: each value ends up with exactly one of a
// taker, close()'s caller, or the adder whose add() returned 0.
TEST(Handoffs, ConcurrentCloseLosesNothing) {
  constexpr int kAdders = 4;
  constexpr uint64_t kEach = 20000;
  Handoffs<std::unique_ptr<uint64_t>> lent;
  std::atomic<uint64_t> sum{0}, count{0};
  std::atomic<uint64_t> added{0};
  std::vector<std::thread> threads;
  for (int a = 0; a < kAdders; ++a) {
    threads.emplace_back([&, a] {
      for (uint64_t i = 0; i < kEach; ++i) {
        auto value = std::make_unique<uint64_t>(a * kEach + i + 1);
        const uint64_t id = lent.add(value);
        if (id == 0) {                   // refused: still ours
          if (value == nullptr) return;  // lost: the counts below will say
          sum += *value;
          count++;
          continue;
        }
        added++;
        if (i % 2 == 0) {  // half taken back right away, half left for close()
          if (auto v = lent.take(id)) {
            sum += **v;
            count++;
          }
        }
      }
    });
  }
  threads.emplace_back([&] {
    while (added.load() < kAdders * kEach / 4) std::this_thread::yield();
    for (auto& v : lent.close()) {
      sum += *v;
      count++;
    }
  });
  for (auto& th : threads) th.join();
  for (auto& v : lent.close()) {  // nothing: added after close() were refused
    sum += *v;
    count++;
  }
  const uint64_t total = kAdders * kEach;
  EXPECT_EQ(count.load(), total);
  EXPECT_EQ(sum.load(), total * (total + 1) / 2);
  EXPECT_EQ(lent.size(), 0u);
}

// ---- lane pairs

using rpcjob::runtime::cuda::encodeNvlinkDescriptor;
using rpcjob::runtime::cuda::NvlinkDescriptor;
using rpcjob::runtime::cuda_lane::LanePairs;
using rpcjob::runtime::cuda_lane::PairChoice;
using rpcjob::wire::DeviceDescriptors;

constexpr const char* kBusA = "00000000:19:00.0";
constexpr const char* kBusB = "00000000:2A:00.0";
constexpr const char* kBusC = "00000000:3B:00.0";
constexpr const char* kBusD = "00000000:4C:00.0";

std::string descriptor(int pid, int index, const std::string& bus) {
  NvlinkDescriptor d;
  d.boot = "b00t";
  d.pid = pid;
  d.bus = bus;
  d.peers = {kBusA, kBusB, kBusC, kBusD};
  d.index = index;
  return encodeNvlinkDescriptor(d);
}

// Two processes on one host of two GPUs, each seeing both.
const DeviceDescriptors kOurs = {{"cuda:0", descriptor(10, 0, kBusA)},
                                 {"cuda:1", descriptor(10, 1, kBusB)}};
const DeviceDescriptors kTheirs = {{"cuda:0", descriptor(20, 0, kBusA)},
                                   {"cuda:1", descriptor(20, 1, kBusB)}};

TEST(LanePairs, AllowsACrossGpuNvlinkPair) {
  const LanePairs pairs = LanePairs::from({{"cuda:0", "cuda:1", "cuda_nvlink"}}, kOurs, kTheirs);
  EXPECT_FALSE(pairs.empty());
  EXPECT_TRUE(pairs.allows(0, 1));
  EXPECT_FALSE(pairs.allows(1, 0));  // directed: local -> remote
  EXPECT_FALSE(pairs.allows(0, 0));
  EXPECT_FALSE(pairs.allows(1, 1));
  EXPECT_TRUE(LanePairs().empty());
  EXPECT_FALSE(LanePairs().allows(0, 1));
}

TEST(LanePairs, RefusesOneGpuSharedByBothWorkers) {
  EXPECT_TRUE(LanePairs::from({{"cuda:0", "cuda:0", "cuda_nvlink"}}, kOurs, kTheirs).empty());
  // Different indices, one bus (CUDA_VISIBLE_DEVICES differs between them).
  const DeviceDescriptors theirs = {{"cuda:3", descriptor(20, 3, kBusA)}};
  EXPECT_TRUE(LanePairs::from({{"cuda:0", "cuda:3", "cuda_nvlink"}}, kOurs, theirs).empty());
}

TEST(LanePairs, RefusesEveryOtherChannel) {
  for (const char* channel : {"cuda_ipc", "cuda_basic", "cuda_xth", "cuda_gdr", "", "cuda_nvlink ",
                              "CUDA_NVLINK", "nvlink"}) {
    EXPECT_TRUE(LanePairs::from({{"cuda:0", "cuda:1", channel}}, kOurs, kTheirs).empty())
        << channel;
  }
  const std::string withNul("cuda_nvlink\0", 12);
  EXPECT_TRUE(LanePairs::from({{"cuda:0", "cuda:1", withNul}}, kOurs, kTheirs).empty());
}

TEST(LanePairs, RefusesAMissingDescriptor) {
  const std::vector<PairChoice> choice = {{"cuda:0", "cuda:1", "cuda_nvlink"}};
  EXPECT_TRUE(LanePairs::from(choice, {}, kTheirs).empty());
  EXPECT_TRUE(LanePairs::from(choice, kOurs, {}).empty());
  // Descriptors of other devices only.
  EXPECT_TRUE(LanePairs::from(choice, {{"cuda:1", descriptor(10, 1, kBusB)}}, kTheirs).empty());
  EXPECT_TRUE(LanePairs::from(choice, kOurs, {{"cuda:0", descriptor(20, 0, kBusA)}}).empty());
  // Ours looked up by the local device, theirs by the remote one, not crossed.
  EXPECT_TRUE(LanePairs::from({{"cuda:0", "cuda:5", "cuda_nvlink"}}, kOurs,
                              {{"cuda:0", descriptor(20, 5, kBusC)}})
                  .empty());
}

TEST(LanePairs, RefusesADescriptorThatDoesNotDecode) {
  const std::vector<PairChoice> choice = {{"cuda:0", "cuda:1", "cuda_nvlink"}};
  for (const std::string bad : {"", "garbage", "b00t|notapid|00000000:19:00.0",
                                "b00t|10|00000000:19:00.0|x|notanindex", "b00t|10"}) {
    EXPECT_TRUE(LanePairs::from(choice, {{"cuda:0", bad}}, kTheirs).empty()) << bad;
    EXPECT_TRUE(LanePairs::from(choice, kOurs, {{"cuda:1", bad}}).empty()) << bad;
  }
  // Decodes, but without a bus id.
  const std::string noBus = "b00t|10||" + std::string(kBusB) + "|0";
  EXPECT_TRUE(LanePairs::from(choice, {{"cuda:0", noBus}}, kTheirs).empty());
  EXPECT_TRUE(LanePairs::from(choice, kOurs, {{"cuda:1", noBus}}).empty());
  // What an older peer sends (no index) is a descriptor.
  EXPECT_TRUE(LanePairs::from(choice, kOurs, {{"cuda:1", "b00t|20|" + std::string(kBusB) + "|"}})
                  .allows(0, 1));
}

TEST(LanePairs, SkipsDeviceStringsThatAreNoCudaIndex) {
  for (const std::string bad :
       {"cpu", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:+1", "cuda:1x", "cuda: 1", "CUDA:1",
        "cuda:01", "cuda:99999999999", " cuda:1", "cuda:1 ", "mps:0"}) {
    // The descriptors name the same string, so only the string is at fault.
    const DeviceDescriptors ours = {{bad, descriptor(10, 0, kBusA)}};
    const DeviceDescriptors theirs = {{bad, descriptor(20, 1, kBusB)}};
    EXPECT_TRUE(LanePairs::from({{bad, "cuda:1", "cuda_nvlink"}}, ours, kTheirs).empty()) << bad;
    EXPECT_TRUE(LanePairs::from({{"cuda:0", bad, "cuda_nvlink"}}, kOurs, theirs).empty()) << bad;
  }
  // A bad choice is skipped; the good one beside it still counts.
  const LanePairs pairs = LanePairs::from({{"cpu", "cpu", "cuda_nvlink"},
                                           {"cuda:x", "cuda:1", "cuda_nvlink"},
                                           {"cuda:0", "cuda:1", "cuda_nvlink"}},
                                          kOurs, kTheirs);
  EXPECT_TRUE(pairs.allows(0, 1));
  // Indices of more than one digit.
  const LanePairs wide = LanePairs::from({{"cuda:10", "cuda:123456789", "cuda_nvlink"}},
                                         {{"cuda:10", descriptor(10, 10, kBusC)}},
                                         {{"cuda:123456789", descriptor(20, 1, kBusD)}});
  EXPECT_TRUE(wide.allows(10, 123456789));
}

TEST(LanePairs, DecidesSeveralPairsEachOnItsOwn) {
  DeviceDescriptors ours = kOurs, theirs = kTheirs;
  ours.emplace_back("cuda:2", descriptor(10, 2, kBusC));
  theirs.emplace_back("cuda:3", descriptor(20, 3, kBusD));
  theirs.emplace_back("cuda:4", "undecodable");
  const std::vector<PairChoice> choices = {
      {"cuda:0", "cuda:1", "cuda_nvlink"},  // yes
      {"cuda:1", "cuda:0", "cuda_nvlink"},  // yes
      {"cuda:0", "cuda:0", "cuda_nvlink"},  // one GPU
      {"cuda:1", "cuda:1", "cuda_nvlink"},  // one GPU
      {"cuda:2", "cuda:3", "cuda_nvlink"},  // yes
      {"cuda:2", "cuda:1", "cuda_ipc"},     // another channel
      {"cuda:2", "cuda:4", "cuda_nvlink"},  // their descriptor does not decode
      {"cuda:5", "cuda:1", "cuda_nvlink"},  // no descriptor of ours
      {"cpu", "cuda:1", "cuda_nvlink"},     // not a CUDA device
  };
  const LanePairs pairs = LanePairs::from(choices, ours, theirs);
  std::set<std::pair<int, int>> allowed;
  for (int l = 0; l < 6; ++l) {
    for (int r = 0; r < 6; ++r) {
      if (pairs.allows(l, r)) allowed.emplace(l, r);
    }
  }
  EXPECT_EQ(allowed, (std::set<std::pair<int, int>>{{0, 1}, {1, 0}, {2, 3}}));
}

// ---- the lane offer's device_tensors field

using rpcjob::runtime::lane::decodeOffer;
using rpcjob::runtime::lane::encodeOffer;
using rpcjob::runtime::lane::LaneOffer;

LaneOffer answer() {
  LaneOffer o;
  o.pid = 4242;
  o.fd = -1;  // an answer: no memfd
  o.token = 77;
  o.capacity = 0;
  o.bellFd = 9;
  o.bellToken = 0xabcdef;
  return o;
}

std::string decodeText(const std::string& text, LaneOffer& out) {
  return decodeOffer(text.data(), text.size(), out);
}

TEST(LaneOfferDeviceTensors, UnsetTheTextIsTheOldOne) {
  EXPECT_EQ(encodeOffer(answer()),
            "pid=4242;fd=0;token=77;capacity=0;bell_fd=10;bell_token=11259375;");
  LaneOffer offer = answer();
  offer.fd = 5;
  offer.capacity = rpcjob::runtime::lane::kDefaultCapacity;
  EXPECT_EQ(encodeOffer(offer),
            "pid=4242;fd=6;token=77;capacity=1048576;bell_fd=10;bell_token=11259375;");
}

TEST(LaneOfferDeviceTensors, RoundTrips) {
  LaneOffer in = answer();
  in.deviceTensors = true;
  const std::string text = encodeOffer(in);
  EXPECT_EQ(text, encodeOffer(answer()) + "device_tensors=1;");
  LaneOffer out;
  ASSERT_EQ(decodeText(text, out), "");
  EXPECT_TRUE(out.deviceTensors);
  EXPECT_EQ(out.pid, in.pid);
  EXPECT_EQ(out.fd, -1);
  EXPECT_EQ(out.token, in.token);
  EXPECT_EQ(out.bellFd, in.bellFd);
  EXPECT_EQ(out.bellToken, in.bellToken);
  // The old text: false, also into an offer that said true before.
  ASSERT_EQ(decodeText(encodeOffer(answer()), out), "");
  EXPECT_FALSE(out.deviceTensors);
}

TEST(LaneOfferDeviceTensors, TakesZeroOrOneAnywhereAndNothingElse) {
  const std::string old = encodeOffer(answer());
  LaneOffer out;
  ASSERT_EQ(decodeText(old + "device_tensors=0;", out), "");
  EXPECT_FALSE(out.deviceTensors);
  ASSERT_EQ(decodeText("device_tensors=1;" + old, out), "");  // any position
  EXPECT_TRUE(out.deviceTensors);
  for (const char* bad :
       {"device_tensors=2;", "device_tensors=;", "device_tensors=x;", "device_tensors=-1;",
        "device_tensors=1x;", "device_tensors=18446744073709551617;"}) {
    out.deviceTensors = true;
    EXPECT_EQ(decodeText(old + bad, out), "a malformed lane offer") << bad;
  }
  // Another key that merely contains it is not it.
  ASSERT_EQ(decodeText(old + "x_device_tensors=7;", out), "");
  EXPECT_FALSE(out.deviceTensors);
}

TEST(LaneOfferLanding, RoundTripsAndOlderPeersSeeTheOldText) {
  LaneOffer in = answer();
  in.landing = true;
  EXPECT_EQ(encodeOffer(in), encodeOffer(answer()) + "landing=1;");
  LaneOffer out;
  ASSERT_EQ(decodeText(encodeOffer(in), out), "");
  EXPECT_TRUE(out.landing);
  EXPECT_FALSE(out.deviceTensors);
  ASSERT_EQ(decodeText(encodeOffer(answer()), out), "");
  EXPECT_FALSE(out.landing);
  const std::string old = encodeOffer(answer());
  for (const char* bad : {"landing=2;", "landing=;", "landing=y;"}) {
    EXPECT_EQ(decodeText(old + bad, out), "a malformed lane offer") << bad;
  }
}

}  // namespace
