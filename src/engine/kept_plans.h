// What the inline runner keeps between calls so that a call that repeats
// the last one (training, a benchmark) plans nothing: the
// recursive-doubling allreduce's steps, another collective's pure plan, a
// group's transfers, each with the call it was made for (comm/inline_calls.cc makes
// and reads them).  Read and written only by the drive token's holder.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/operation.h"

namespace tern {

struct KeptPlans {
  // A kept call's arguments and level (level -1: none kept).
  struct Key {
    int kind = 0, level = -1, dt = 0, op = 0, root = 0;
    const void* src = nullptr;
    const void* dst = nullptr;
    size_t count = 0;
  };
  // The allreduce's schedule: room for the most steps a rank has; the call
  // they were made for, its descriptor, their count and how many of them
  // were found to go whole (InlineRunner::runStepsAlone).
  std::vector<Step> steps;
  Key stepsKey;
  OpDesc stepsDesc;
  size_t stepsN = 0, stepsWhole = 0;
  // Other collectives' plans (planPure): the phase, the call it was planned
  // for and its descriptor.
  Phase phase;
  Key phaseKey;
  OpDesc phaseDesc;
  // The sends and receives a group last ran inline: their keys,
  // descriptors and steps.
  struct Transfers {
    static constexpr size_t kMax = 16;
    size_t n = 0;  // 0: none kept
    Key keys[kMax];
    OpDesc descs[kMax];
    Step steps[kMax];
    bool whole = false;  // every step found to go whole (InlineRunner::runTransfersAlone)
  } transfers;
};

}  // namespace tern
