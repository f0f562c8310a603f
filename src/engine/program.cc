// Programs of Steps: moving a phase onto the low-latency siblings (program.h).
#include "engine/program.h"

namespace tern {

void takeSmallChannels(Phase& ph, uint64_t opBytes) {
  for (const Program& p : ph.progs)
    for (const Step& s : p.steps)
      if (s.codec) return;
  auto small = [opBytes](Conn* c) {
    Conn* ll = c ? c->small(opBytes) : nullptr;
    return ll ? ll : c;
  };
  for (Program& p : ph.progs)
    for (Step& s : p.steps) {
      s.in = small(s.in);
      s.out = small(s.out);
    }
}

}  // namespace tern
