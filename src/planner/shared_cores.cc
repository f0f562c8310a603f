#include "planner/shared_cores.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "planner/kfkb.h"

namespace tern::planner {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

class SharedCores {
 public:
  SharedCores(const PipelineModel& model, int64_t m, int64_t k, std::vector<TraceEvent>* trace)
      : p_(static_cast<int>(model.stages.size())), m_(m), cores_(static_cast<double>(model.cores)), trace_(trace),
        next_(p_, 0), left_(p_, -1), startedAt_(p_, 0), fwdIn_(p_ * m, kNever), bwdIn_(p_ * m, kNever),
        downFree_(p_, 0), upFree_(p_, 0) {
    const double mb = static_cast<double>(model.batchSize / m);
    for (int s = 0; s < p_; ++s) {
      order_.push_back(kfkbOrder(m, k, p_, s));
      tf_.push_back(model.stages[s].fwdMsPerSample * mb);
      tb_.push_back(model.stages[s].bwdMsPerSample * mb);
      background_.push_back(model.stages[s].backgroundCores);
    }
    for (int s = 0; s + 1 < p_; ++s) {
      busy_.push_back(transferMs(model, s, mb));
      latency_.push_back(model.links[s].latencyUs * 1e-3);
    }
  }

  double run() {
    size_t remaining = 2 * static_cast<size_t>(m_) * p_;
    std::vector<int> active;
    while (remaining > 0) {
      active.clear();
      double nextArrival = kNever, background = 0;
      for (int s = 0; s < p_; ++s) {
        const double at = inputAt(s);
        if (at <= now_) active.push_back(s);
        else nextArrival = std::min(nextArrival, at);
        if (next_[s] < order_[s].size()) background += background_[s];
      }
      if (active.empty()) {
        if (nextArrival == kNever) throw std::logic_error("shared-cores simulation made no progress (a schedule bug)");
        now_ = nextArrival;
        continue;
      }
      // Each active stage runs at `rate` of a core (never more than one);
      // the next event is the first operation to finish or the first input
      // to arrive elsewhere.
      const double rate = std::min(1.0, cores_ / (static_cast<double>(active.size()) + background));
      double step = nextArrival - now_;
      for (int s : active) {
        if (left_[s] < 0) begin(s);
        step = std::min(step, left_[s] / rate);
      }
      now_ += step;
      for (int s : active) {
        const bool ends = left_[s] / rate <= step;  // the operation(s) that set the step
        left_[s] -= step * rate;
        if (ends) {
          finish(s);
          --remaining;
        }
      }
    }
    return now_;
  }

 private:
  // When stage s's next operation can start (its input's arrival), or never
  // when it has none left.
  double inputAt(int s) const {
    if (next_[s] == order_[s].size()) return kNever;
    const auto [forward, i] = order_[s][next_[s]];
    if (forward) return s == 0 ? 0 : fwdIn_[s * m_ + i];
    return s + 1 == p_ ? 0 : bwdIn_[s * m_ + i];
  }

  void begin(int s) {
    left_[s] = order_[s][next_[s]].forward ? tf_[s] : tb_[s];
    startedAt_[s] = now_;
  }

  // Stage s's operation ends now: its output goes on the link to the neighbour.
  void finish(int s) {
    const auto [forward, i] = order_[s][next_[s]++];
    left_[s] = -1;
    if (trace_)
      trace_->push_back({forward ? TraceEvent::Kind::Forward : TraceEvent::Kind::Backward, s, i, startedAt_[s], now_});
    if (forward ? s + 1 == p_ : s == 0) return;
    const int link = forward ? s : s - 1;
    double& wireFree = (forward ? downFree_ : upFree_)[link];
    const double leave = std::max(now_, wireFree);
    wireFree = leave + busy_[link];
    (forward ? fwdIn_[(s + 1) * m_ + i] : bwdIn_[(s - 1) * m_ + i]) = wireFree + latency_[link];
    if (trace_)
      trace_->push_back({forward ? TraceEvent::Kind::ActivationSend : TraceEvent::Kind::GradientSend, s, i, leave,
                         wireFree});
  }

  const int p_;
  const int64_t m_;
  const double cores_;
  std::vector<TraceEvent>* trace_;
  std::vector<std::vector<KfkbOp>> order_;
  std::vector<size_t> next_;
  std::vector<double> left_;       // ms of one core's work left in the current operation; < 0: none begun
  std::vector<double> startedAt_;
  std::vector<double> tf_, tb_, background_, busy_, latency_;
  std::vector<double> fwdIn_, bwdIn_;  // [s * m + i]: arrival at stage s
  std::vector<double> downFree_, upFree_;
  double now_ = 0;
};

}  // namespace

double simulateSharedCores(const PipelineModel& model, int64_t m, int64_t k, std::vector<TraceEvent>* trace) {
  return SharedCores(model, m, k, trace).run();
}

}  // namespace tern::planner
