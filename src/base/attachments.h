// State that a layer above an object keeps with it, owned and freed by the
// object without knowing its type: the communicator carries the ternary
// allreduce's options, Philox counters and residuals (collectives/ternary.h)
// this way, so src/comm never reaches up into src/collectives.  One value
// per type, made on first use.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <typeindex>

namespace tern {

class Attachments {
 public:
  // The T attached here, made by make() (returning a std::shared_ptr<T>)
  // the first time.  The reference stays valid until the owner is freed.
  template <class T, class Make>
  T& getOrMake(Make make) {
    std::lock_guard<std::mutex> lk(mu_);
    std::shared_ptr<void>& slot = slots_[std::type_index(typeid(T))];
    if (!slot) slot = std::shared_ptr<T>(make());
    return *static_cast<T*>(slot.get());
  }

 private:
  std::mutex mu_;
  std::map<std::type_index, std::shared_ptr<void>> slots_;
};

}  // namespace tern
