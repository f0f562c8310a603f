#include "core/progress.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>

#include "core/error.h"
#include "core/log.h"

namespace tern {

ternResult_t Operation::wait(std::string* error) {
  // Short operations finish within microseconds: spin briefly before sleeping
  // so a small allreduce does not pay a futex wake-up.
  auto spinUntil = std::chrono::steady_clock::now() + std::chrono::microseconds(30);
  while (!done() && std::chrono::steady_clock::now() < spinUntil) _mm_pause();
  if (!done()) {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait(lk, [&] { return done(); });
  }
  if (error) *error = error_;
  return result_;
}

void Operation::finish(ternResult_t r, std::string error) {
  result_ = r;
  error_ = std::move(error);
  {
    std::lock_guard<std::mutex> lk(m_);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

ProgressEngine::ProgressEngine(int rank, std::function<void(ternResult_t)> onError)
    : rank_(rank), onError_(std::move(onError)) {
  thread_ = std::thread([this] { loop(); });
}

ProgressEngine::~ProgressEngine() { stop(); }

std::shared_ptr<Operation> ProgressEngine::submit(std::function<ternResult_t()> fn) {
  auto op = std::make_shared<Operation>(std::move(fn));
  {
    std::lock_guard<std::mutex> lk(m_);
    queue_.push_back(op);
  }
  cv_.notify_one();
  return op;
}

ternResult_t ProgressEngine::runNow(std::function<ternResult_t()> fn, std::string* error) {
  {
    std::unique_lock<std::mutex> lk(m_);
    if (!queue_.empty() || busy_) {
      lk.unlock();
      return submit(std::move(fn))->wait(error);
    }
    busy_ = true;
  }
  clearThreadError();
  ternResult_t r = fn();
  if (r != ternSuccess && onError_) onError_(r);
  if (error) *error = r == ternSuccess ? std::string() : lastThreadError();
  bool queued;
  {
    std::lock_guard<std::mutex> lk(m_);
    busy_ = false;
    queued = !queue_.empty();
  }
  // Wake the progress thread only for work queued meanwhile: a futile wake-up
  // per call costs a context switch on a busy core.
  if (queued) cv_.notify_one();
  return r;
}

void ProgressEngine::stop() {
  {
    std::lock_guard<std::mutex> lk(m_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool ProgressEngine::bindTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  return pthread_setaffinity_np(thread_.native_handle(), sizeof set, &set) == 0;
}

void ProgressEngine::loop() {
  setLogRank(rank_);
  for (;;) {
    std::shared_ptr<Operation> op;
    {
      std::unique_lock<std::mutex> lk(m_);
      cv_.wait(lk, [&] { return stopping_ || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;  // stopping, nothing left
      op = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    clearThreadError();
    ternResult_t r = op->fn_();
    if (r != ternSuccess && onError_) onError_(r);
    {
      std::lock_guard<std::mutex> lk(m_);
      busy_ = false;
    }
    op->finish(r, r == ternSuccess ? std::string() : lastThreadError());
  }
}

}  // namespace tern
