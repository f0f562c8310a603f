// A tern process group's Works and the thread that completes their futures.
//
// Every c10d op is one tern group issued with ternGroupEndAsync on the calling
// thread (so at its priority level, in call order: what makes every rank's
// calls match up); its TernWork wraps the ternRequest_t.  tern's engine runs
// the operations; nothing here does.  A request is consumed exactly once
// (ternRequestWait/Test release it), by whichever comes first: wait(), an
// is_completed() that finds it done, or the group's Completer, which waits on
// outstanding requests (per priority level, in issue order) so that futures
// complete without anybody calling wait().
#pragma once
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pthread.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tern/tern.h"

namespace tern_torch {

using Tensors = std::vector<at::Tensor>;

// A failed tern call, with tern's sentence; RuntimeError in Python.
struct TernFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The calling thread's last tern error (not the communicator's, which another
// thread's operation may have set meanwhile).  A timeout is worded as c10d's
// backends word it ("Timed out waiting ... for <op> to complete"): callers and
// torch's own tests match on that.
inline std::exception_ptr failure(ternResult_t r, const std::string& what = "") {
  std::string head = r == ternTimeout ? "Timed out waiting for " + (what.empty() ? "the operation" : what) +
                                            " to complete"
                                      : std::string(ternGetErrorString(r));
  return std::make_exception_ptr(TernFailure("tern: " + head + ": " + ternGetLastError(nullptr)));
}

// "allreduce", "barrier", ... (c10d spells them in capitals).
inline std::string opName(c10d::OpType t) {
  std::string s = c10d::opTypeToString(t);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

inline void check(ternResult_t r) {
  if (r != ternSuccess) std::rethrow_exception(failure(r));
}

class TernWork : public c10d::Work {
 public:
  // `after`: local work once the transfer is done (unpacking a flat buffer,
  // folding gathered values); runs on the thread that settles the request.
  // `keep`: tensors tern reads or writes besides `outputs` (temporaries,
  // inputs), alive until then.
  TernWork(int rank, c10d::OpType type, Tensors outputs, Tensors keep, std::function<void()> after)
      : Work(rank, type), outputs_(std::move(outputs)), keep_(std::move(keep)),
        after_(std::move(after)),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::ofTensors())) {}

  // A receive's Work names its sender (torch's Work._source_rank()); from
  // any source, tern writes it when the receive is bound to a peer.
  void setSource(std::shared_ptr<const int> rank) { source_ = std::move(rank); }
  int sourceRank() const override {
    TORCH_CHECK(source_, "tern: sourceRank() is only known for the Work of a recv");
    TORCH_CHECK(*source_ >= 0, "tern: the sender of a recv from any source is known once it completes");
    return *source_;
  }

  // The request of the group issued for this work, or the failure to issue it
  // (then `request` is what was issued anyway, or NULL).
  void start(ternRequest_t request, std::exception_ptr issueError) {
    request_ = request;
    issueError_ = issueError;
    ternGetPriority(&level_);  // the level the issuing thread gave the group
    if (!request_) settleLocked(ternSuccess);
  }
  int level() const { return level_; }

  bool isCompleted() override {
    std::unique_lock<std::mutex> lk(reqMu_, std::try_to_lock);
    if (lk.owns_lock() && !settled_) {  // else another thread is settling it
      int done = 0;
      ternResult_t r = ternRequestTest(request_, &done);
      if (done || r != ternSuccess) settleLocked(r);
    }
    return Work::isCompleted();
  }

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override {
    if (timeout == kNoTimeout) {
      settle();  // ternRequestWait: bounded by the communicator's timeout
    } else {
      // A shorter bound of the caller's own: poll (the operation goes on).
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (!isCompleted()) {
        TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "tern: Timed out waiting ", timeout.count(),
                    " ms (given to wait()) for ", opName(opType_),
                    " to complete; the operation goes on");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    markFuture();
    return Work::wait();  // rethrows the operation's failure
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  Tensors result() override { return outputs_; }

  // Waits for the request unless it was consumed already, then runs `after`.
  void settle() {
    std::lock_guard<std::mutex> lk(reqMu_);
    if (!settled_) settleLocked(ternRequestWait(request_));
  }

  // Once, after settle(): runs the future's callbacks on this thread.
  void markFuture() {
    if (marked_.exchange(true)) return;
    if (auto e = exception()) future_->setError(e);
    else future_->markCompleted(c10::IValue(outputs_));
  }

 private:
  void settleLocked(ternResult_t r) {
    settled_ = true;
    request_ = nullptr;  // released by ternRequestWait/Test
    std::exception_ptr e = issueError_                ? issueError_
                           : r != ternSuccess ? failure(r, opName(opType_))
                                              : nullptr;
    if (!e && after_) {
      try {
        after_();
      } catch (...) {
        e = std::current_exception();
      }
    }
    after_ = nullptr;
    keep_.clear();
    finish(e);
  }

  Tensors outputs_, keep_;
  std::function<void()> after_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
  std::mutex reqMu_;  // held while the request is being waited on or tested
  ternRequest_t request_ = nullptr;
  std::exception_ptr issueError_;
  bool settled_ = false;
  std::atomic<bool> marked_{false};
  std::shared_ptr<const int> source_;
  int level_ = TERN_PRIORITY_DEFAULT;
};

// Settles a process group's works and completes their futures: per priority
// level in issue order, levels independently, the most urgent first.
//
// Levels must not wait on each other: an urgent op's future would otherwise
// complete only after every bulk op issued before it, and a caller that holds
// back bulk work until urgent work is done (a ByteScheduler-style credit, as
// tern.torch.PriorityScheduler does) would wait forever.  So each level has
// its own waiting role: a thread blocks on the oldest work of a level while
// another may block on another level's.
//
// Future callbacks run user code that may issue new ops and wait on their
// futures (torch's powerSGD hook does): the thread running a callback must
// not be the one that would complete those futures.  So the thread that
// settled a work hands its level's waiting role on before it runs the work's
// callbacks, and a thread is added only when a level has work nobody waits
// on and every thread is busy (so there are at most levels + nested
// callbacks threads).
//
// The process group may be destroyed on one of these threads: a future
// callback (Python) can drop the last reference to it.  That thread cannot
// join itself (std::thread::join throws, and from the destructor that was
// std::terminate: seen in CI, test_torch_hooks' powerSGD); so the state
// lives in a shared block that every thread holds, stop() detaches the
// calling thread instead of joining it, and that thread finds the work
// drained when it returns from the callback and ends on state still alive.
class Completer {
 public:
  Completer() : s_(std::make_shared<State>()) {}
  ~Completer() { stop(); }

  void add(c10::intrusive_ptr<TernWork> w) { s_->add(s_, std::move(w)); }

  // Settles everything outstanding (each within tern's timeout), then ends
  // the threads (the calling one, if it is one of them, ends on its own).
  void stop() { s_->stop(); }

 private:
  struct State {
    void add(const std::shared_ptr<State>& self, c10::intrusive_ptr<TernWork> w) {
      std::lock_guard<std::mutex> lk(mu_);
      pending_[clampLevel(w->level())].push_back(std::move(w));
      // Every thread may be busy (waiting on another level, or in a callback).
      // One work makes at most one level claimable: one idle thread is
      // enough.  Waking them all woke ~9 threads per rank at every work of a
      // PriorityScheduler step (~180 futex waits a second each; perf/RESULTS.md,
      // 2026-11-29: priorities at 4 hosts, which variant is CPU-bound).
      if (idle_ == 0 && claimable() >= 0) spawn(self);
      else cv_.notify_one();
    }

    void stop() {
      {
        std::lock_guard<std::mutex> lk(mu_);
        stopping_ = true;
      }
      cv_.notify_all();
      for (;;) {  // a thread may add another until it is joined
        std::thread t;
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (threads_.empty()) break;
          t = std::move(threads_.back());
          threads_.pop_back();
        }
        if (t.get_id() == std::this_thread::get_id()) t.detach();
        else t.join();
      }
    }

    static int clampLevel(int l) { return l < 0 ? 0 : l >= TERN_PRIORITY_LEVELS ? TERN_PRIORITY_LEVELS - 1 : l; }

    // The most urgent level with work that nobody waits on, or -1.
    int claimable() const {
      for (int l = 0; l < TERN_PRIORITY_LEVELS; ++l)
        if (!waiting_[l] && !pending_[l].empty()) return l;
      return -1;
    }
    bool drained() const {
      for (const auto& q : pending_)
        if (!q.empty()) return false;
      return true;
    }
    // Under mu_.  The thread holds the state, so it outlives the Completer.
    void spawn(const std::shared_ptr<State>& self) {
      threads_.emplace_back([self] { self->loop(self); });
    }

    void loop(const std::shared_ptr<State>& self) {
      pthread_setname_np(pthread_self(), "tern-completer");  // as libtern names its own threads
      std::unique_lock<std::mutex> lk(mu_);
      for (;;) {
        ++idle_;
        cv_.wait(lk, [&] { return claimable() >= 0 || (stopping_ && drained()); });
        --idle_;
        int level = claimable();
        if (level < 0) return;  // stopping, nothing left
        waiting_[level] = true;
        c10::intrusive_ptr<TernWork> w = std::move(pending_[level].front());
        pending_[level].pop_front();
        lk.unlock();
        w->settle();
        lk.lock();
        waiting_[level] = false;
        if (claimable() >= 0 && idle_ == 0) spawn(self);
        // The level's role may pass to an idle thread while this one runs
        // the callbacks; stopping, every idle thread must see the drain.
        if (stopping_) cv_.notify_all();
        else cv_.notify_one();
        lk.unlock();
        w->markFuture();
        w.reset();  // the last reference may free tensors: not under the lock
        lk.lock();
      }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<c10::intrusive_ptr<TernWork>> pending_[TERN_PRIORITY_LEVELS];
    bool waiting_[TERN_PRIORITY_LEVELS] = {};  // a thread is settling that level's oldest work
    int idle_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
  };
  std::shared_ptr<State> s_;
};

}  // namespace tern_torch
