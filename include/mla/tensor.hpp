// mla/tensor.hpp — the one host array type: a named, row-major, contiguous buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mla {

template <class T>
struct Tensor {
  std::string name;            // printed in errors and dumps
  std::vector<int64_t> shape;  // row-major; empty shape = scalar
  std::vector<T> data;         // size == numel()

  Tensor() = default;
  Tensor(std::string n, std::vector<int64_t> s) : name(std::move(n)), shape(std::move(s)), data(count(shape)) {}

  static int64_t count(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  }
  int64_t numel() const { return count(shape); }
  int64_t dim(size_t i) const { return shape.at(i); }
  bool empty() const { return data.empty(); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
};

using TensorF = Tensor<float>;
using TensorD = Tensor<double>;

// "[7168, 8192]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace mla
