// Admission (admission.h): what is submitted and not yet complete.
#include "engine/admission.h"

namespace tern {

int Admission::queue(const std::vector<OpPtr>& ops) {
  int standing = 0;
  std::lock_guard<std::mutex> lk(lock_);
  for (const OpPtr& op : ops) {
    op->stamp = stamp();
    pending_.push_back(op);
    standing += op->standing;
  }
  anyPending_.store(true, std::memory_order_release);
  standing_.fetch_add(standing);
  outstanding_.fetch_add(static_cast<int>(ops.size()) - standing);
  return standing;
}

}  // namespace tern
