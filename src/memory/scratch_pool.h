// Host scratch buffers kept between calls.  Fresh memory is slow to fault in
// (first touch), and work that needs scratch (error feedback's g + residual,
// in-place all-to-all's copy of the send blocks) usually needs the same size
// again on the next training step: a returned buffer keeps its pages.
#pragma once
#include <cstddef>
#include <mutex>
#include <vector>

namespace tern {

template <class T>
class ScratchPool {
 public:
  explicit ScratchPool(size_t keep = 4) : keep_(keep) {}
  // A buffer of at least n elements (contents undefined).
  std::vector<T> borrow(size_t n) {
    std::vector<T> v;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (!spare_.empty()) {
        v = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    if (v.size() < n) v.resize(n);
    return v;
  }
  void giveBack(std::vector<T> v) {
    if (v.empty()) return;
    std::lock_guard<std::mutex> lk(m_);
    if (spare_.size() < keep_) spare_.push_back(std::move(v));
  }

 private:
  std::mutex m_;
  size_t keep_;
  std::vector<std::vector<T>> spare_;
};

}  // namespace tern
