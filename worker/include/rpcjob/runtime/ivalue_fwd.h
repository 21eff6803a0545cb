#pragma once
// c10::IValue by name only: ATen/core/ivalue.h costs seconds per translation unit,
// so public headers declare it and the files that use values include it.

namespace c10 {
struct IValue;
}
