// Barrier: a one-integer recursive-doubling allreduce; nobody leaves before
// everybody has arrived, in log2(N) rounds.
#include "collectives/collectives.h"

namespace tern {

ternResult_t barrier(Comm& c) {
  int token = 0;
  return allReduceRecursiveDoubling(c, &token, &token, 1, ternInt32, ternMax);
}

}  // namespace tern
