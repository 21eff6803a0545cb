// RRefs inside call values: forked when a message is sent, adopted (turned back
// into RRefs, registering the fork) when it is received, wherever they are in
// the value (tuples, lists, dict values). Values without RRefs, the common
// case, are scanned once and sent as they are.
#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

// Nesting the walk follows; an RRef deeper than this is not found (and, being
// a capsule, then fails to serialize rather than travel without a fork).
constexpr int kMaxDepth = 64;

template <class IsLeaf>
bool contains(const c10::IValue& v, const IsLeaf& isLeaf, int depth) {
  if (isLeaf(v)) return true;
  if (depth >= kMaxDepth) return false;
  if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) {
      if (contains(e, isLeaf, depth + 1)) return true;
    }
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) {
      if (contains(e, isLeaf, depth + 1)) return true;
    }
  } else if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict()) {
      if (contains(e.value(), isLeaf, depth + 1)) return true;
    }
  }
  return false;
}

// A copy of `v` with every leaf replaced by leaf(v).
template <class IsLeaf, class Leaf>
c10::IValue rewrite(const c10::IValue& v, const IsLeaf& isLeaf, const Leaf& leaf, int depth) {
  if (isLeaf(v)) return leaf(v);
  if (depth >= kMaxDepth) return v;
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& e : v.toTupleRef().elements()) {
      items.push_back(rewrite(e, isLeaf, leaf, depth + 1));
    }
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (v.isList()) {
    if (!contains(v, isLeaf, depth)) return v;  // a typed list (tensors, ints) keeps its type
    c10::impl::GenericList out(c10::AnyType::get());
    for (const auto& e : v.toListRef()) out.push_back(rewrite(e, isLeaf, leaf, depth + 1));
    return out;
  }
  if (v.isGenericDict()) {
    if (!contains(v, isLeaf, depth)) return v;
    auto dict = v.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), c10::AnyType::get());
    for (const auto& e : dict) out.insert(e.key(), rewrite(e.value(), isLeaf, leaf, depth + 1));
    return out;
  }
  return v;
}

}  // namespace

c10::IValue RuntimeImpl::forkRRefs(c10::IValue value, std::vector<Forked>* made) {
  auto isLeaf = [](const c10::IValue& v) { return RRef::isRRef(v); };
  if (!contains(value, isLeaf, 0)) return value;
  return rewrite(
      value, isLeaf,
      [this, made](const c10::IValue& v) { return forkForWire(RRef::fromIValue(v), made); }, 0);
}

void RuntimeImpl::unfork(const std::vector<Forked>& made) {
  for (const auto& f : made) {
    if (f.owner) {
      rrefs_->deleteFork(f.rref, f.fork);
    } else {
      rrefs_->acceptChild(f.fork);  // drops the reference held for the child
    }
  }
}

void RuntimeImpl::unforkIfUnsent(const Future& sent, const std::vector<Forked>& made) {
  // Done already: refused before it was written (a value that cannot be
  // serialized, no pipe, shutting down). An answer cannot normally be back
  // this soon; if one is, it is an error after the callee released its forks,
  // and releasing a fork twice is harmless (the owner's set drops it once).
  if (!made.empty() && sent.isDone() && sent.hasError()) unfork(made);
}

c10::IValue RuntimeImpl::adoptRRefs(const c10::IValue& value) {
  auto isLeaf = [](const c10::IValue& v) { return isWireFork(v); };
  if (!contains(value, isLeaf, 0)) return value;
  return rewrite(
      value, isLeaf, [this](const c10::IValue& v) { return adoptFork(v).toIValue(); }, 0);
}

}  // namespace rpcjob::runtime
