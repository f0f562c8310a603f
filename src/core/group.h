// ternGroupStart/End: calls made between them are collected per thread and
// launched together at the outermost ternGroupEnd, one operation per
// communicator, so send/recv pairs progress together and cannot deadlock.
#pragma once
#include <functional>
#include <vector>

#include "collectives/collectives.h"
#include "core/comm.h"

namespace tern {

struct GroupWork {
  Comm* comm;
  std::vector<std::function<ternResult_t()>> collectives;  // run in call order
  std::vector<P2P> p2p;                                     // run together, after them
};

bool groupOpen();
void groupAddCollective(Comm* c, std::function<ternResult_t()> fn);
void groupAddP2P(Comm* c, const P2P& p);
// Submits every work item to its communicator's progress thread and waits.
ternResult_t runBlocking(const std::vector<GroupWork>& works);

}  // namespace tern
