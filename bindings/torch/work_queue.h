// The worker behind a tern process group: operations run on one thread in
// issue order (what makes every rank's calls match up), each completing a
// Work whose future torch waits on.
//
// Point-to-point operations are held back and run together as one tern group
// (receives before sends): a rank that posts isend and irecv before waiting
// never blocks in its send while its peer blocks in its own.  They run when a
// Work of theirs is waited on (or its future asked for), when a collective is
// queued behind them, or after kP2PWindow without either — so nothing waits
// for ever.
#pragma once
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tern_torch {

using Tensors = std::vector<at::Tensor>;
class WorkQueue;

class TernWork : public c10d::Work {
 public:
  TernWork(int rank, c10d::OpType type, Tensors outputs, std::shared_ptr<WorkQueue> heldIn)
      : Work(rank, type), outputs_(std::move(outputs)), heldIn_(std::move(heldIn)),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::ofTensors())) {}
  void complete(std::exception_ptr e) {
    finish(e);
    if (e) future_->setError(e);
    else future_->markCompleted(c10::IValue(outputs_));
  }
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  Tensors result() override { return outputs_; }

 private:
  Tensors outputs_;
  std::shared_ptr<WorkQueue> heldIn_;  // point-to-point: the queue holding it back
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

struct Job {
  c10::intrusive_ptr<TernWork> work;
  std::function<void()> fn;
};

class WorkQueue : public std::enable_shared_from_this<WorkQueue> {
 public:
  static constexpr std::chrono::milliseconds kP2PWindow{50};
  // `run` executes a batch on the worker (point-to-point batches as a group).
  using Runner = std::function<void(std::vector<Job>&, bool p2p)>;

  void start(Runner run) {
    run_ = std::move(run);
    thread_ = std::thread([this] { loop(); });
  }
  // Runs everything queued, then ends the worker.
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      flushLocked();
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  c10::intrusive_ptr<TernWork> push(int rank, c10d::OpType type, Tensors outputs,
                                    std::function<void()> fn, bool p2p) {
    auto w = c10::make_intrusive<TernWork>(rank, type, std::move(outputs),
                                           p2p ? shared_from_this() : nullptr);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (p2p) {
        if (held_.empty()) heldSince_ = Clock::now();
        held_.push_back({w, std::move(fn)});
      } else {
        flushLocked();  // keep issue order
        batches_.push_back({{{w, std::move(fn)}}, false});
      }
    }
    cv_.notify_one();
    return w;
  }
  void flush() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      flushLocked();
    }
    cv_.notify_one();
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Batch {
    std::vector<Job> jobs;
    bool p2p;
  };
  void flushLocked() {
    if (held_.empty()) return;
    batches_.push_back({std::move(held_), true});
    held_.clear();
  }
  void loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      if (batches_.empty() && !held_.empty() && Clock::now() >= heldSince_ + kP2PWindow) flushLocked();
      if (!batches_.empty()) {
        Batch b = std::move(batches_.front());
        batches_.pop_front();
        lk.unlock();
        run_(b.jobs, b.p2p);
        lk.lock();
        continue;
      }
      if (stopping_) return;
      if (held_.empty()) cv_.wait(lk);
      else cv_.wait_until(lk, heldSince_ + kP2PWindow);
    }
  }

  Runner run_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> batches_;
  std::vector<Job> held_;
  Clock::time_point heldSince_;
  bool stopping_ = false;
  std::thread thread_;
};

inline bool TernWork::wait(std::chrono::milliseconds timeout) {
  if (heldIn_) heldIn_->flush();
  return Work::wait(timeout);
}

inline c10::intrusive_ptr<c10::ivalue::Future> TernWork::getFuture() {
  if (heldIn_) heldIn_->flush();
  return future_;
}

}  // namespace tern_torch
