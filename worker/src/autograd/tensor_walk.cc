#include "autograd/tensor_walk.h"

namespace rpcjob::runtime::autograd {

void forEachTensor(const c10::IValue& value, const std::function<void(const at::Tensor&)>& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& item : value.toTupleRef().elements()) forEachTensor(item, fn);
  } else if (value.isList()) {
    for (const auto& item : value.toListRef()) forEachTensor(item, fn);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) forEachTensor(entry.value(), fn);
  }
}

c10::IValue mapTensors(const c10::IValue& value,
                       const std::function<at::Tensor(const at::Tensor&)>& fn) {
  if (value.isTensor()) return fn(value.toTensor());
  if (value.isTuple()) {
    std::vector<c10::IValue> items;
    for (const auto& item : value.toTupleRef().elements()) items.push_back(mapTensors(item, fn));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (value.isList()) {
    c10::List<c10::IValue> list = value.toList().copy();
    for (size_t i = 0; i < list.size(); ++i) list.set(i, mapTensors(list.get(i), fn));
    return list;
  }
  if (value.isGenericDict()) {
    c10::Dict<c10::IValue, c10::IValue> dict = value.toGenericDict().copy();
    for (const auto& entry : value.toGenericDict()) {
      dict.insert_or_assign(entry.key(), mapTensors(entry.value(), fn));
    }
    return dict;
  }
  return value;
}

}  // namespace rpcjob::runtime::autograd
