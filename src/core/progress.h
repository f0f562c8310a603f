// One progress thread per communicator.  API calls enqueue operations; the
// thread runs them in issue order (as a CUDA stream would) and the caller
// waits on the operation's completion.  Keeping all data movement on one
// thread is what lets async callers (torch Work objects) overlap with it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tern/tern.h"

namespace tern {

class Operation {
 public:
  explicit Operation(std::function<ternResult_t()> fn) : fn_(std::move(fn)) {}
  // Blocks until the progress thread has run the operation; returns its result
  // and, on failure, the sentence that explains it.
  ternResult_t wait(std::string* error);
  bool done() const { return done_.load(std::memory_order_acquire); }

 private:
  friend class ProgressEngine;
  void finish(ternResult_t r, std::string error);
  std::function<ternResult_t()> fn_;
  ternResult_t result_ = ternSuccess;
  std::string error_;
  std::atomic<bool> done_{false};
  std::mutex m_;
  std::condition_variable cv_;
};

class ProgressEngine {
 public:
  // `onError` runs on the progress thread after a failed operation.
  ProgressEngine(int rank, std::function<void(ternResult_t)> onError);
  ~ProgressEngine();
  std::shared_ptr<Operation> submit(std::function<ternResult_t()> fn);
  // Runs `fn` to completion on the calling thread when nothing is queued or
  // running (a blocking call then pays no thread hand-off, ~20 us here);
  // otherwise queues it behind the pending work and waits.  Either way
  // operations of one communicator run one at a time, in issue order.
  ternResult_t runNow(std::function<ternResult_t()> fn, std::string* error);
  void stop();
  // Binds the progress thread to these CPUs (OS indices); false if refused.
  bool bindTo(const std::vector<int>& cpus);

 private:
  void loop();
  int rank_;
  std::function<void(ternResult_t)> onError_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Operation>> queue_;
  bool stopping_ = false;
  bool busy_ = false;  // an operation is executing (on either thread)
  std::thread thread_;
};

}  // namespace tern
