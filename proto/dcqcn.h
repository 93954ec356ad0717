// DCQCN (Zhu et al., SIGCOMM 2015): the reaction point's per-QP rate, and the pacing that enforces it.
//
// The notification point (a CE-marked packet -> a CNP to the sender's QP) lives in the responder; this is what the
// sender does with CNPs (cm-nvmf-dcqcn.md §4, rocev2.md §7.3-7.4). The parameters carry the names of NVIDIA's
// ConnectX firmware knobs (rpg_*, dce_tcp_*), so results can be set side by side with a NIC's.
//
// Time is driven by the caller (now_ns), never read here, so the state machine runs the same on an engine and in
// the simulated network of the tests. Every clock of the algorithm is evaluated lazily, when the QP next sends or
// takes a CNP: α's decay over n periods is one power computed by squaring, and the rate-increase timer's n
// expiries are applied as n increase events (bounded). So there is no timer per QP or per packet, and a QP whose
// rate has recovered to line rate costs one predictable branch per packet (limited() is false).
//
// Pacing is a token bucket over frame bytes: a packet may leave when the bucket's next-send time has come; a
// QP that was idle may send a burst of up to kBurstBytes at once (the engine sends in bursts, and a timer tick is
// about 1 us), never more.
#pragma once

#include <cstdint>

namespace uroce::proto {

// Defaults: the SIGCOMM 2015 paper's parameters (cm-nvmf-dcqcn.md §4.1). NVIDIA's ConnectX values are in
// config/examples/connectx.yaml; bench/README.md "incast" compares the two.
struct DcqcnParameters {
  uint32_t max_rate_mbps = 100'000;     // line rate: where a QP starts and where the limiter switches off
  uint32_t min_rate_mbps = 1;           // rpg_min_rate
  uint32_t ai_rate_mbps = 40;           // rpg_ai_rate: additive increase step (R_AI)
  uint32_t hai_rate_mbps = 400;         // rpg_hai_rate: hyper increase step (R_HAI)
  uint32_t time_reset_ns = 55'000;      // rpg_time_reset: the rate-increase timer T
  uint32_t byte_reset = 10'000'000;     // rpg_byte_reset: the rate-increase byte counter B
  uint32_t threshold = 5;               // rpg_threshold: F, the stages of fast recovery
  uint32_t min_dec_fac = 50;            // rpg_min_dec_fac: the largest single decrease, in percent
  uint32_t dce_tcp_g = 1020;            // α ← α·g/1024 each α period (+ (1024 − g)/1024 in a period with a CNP)
  uint32_t dce_tcp_rtt_ns = 55'000;     // the α period (the paper's K)
  uint32_t initial_alpha_value = 1023;  // α (of 1024) at the first CNP
  uint32_t rate_reduce_monitor_period_ns = 50'000;  // at most one decrease per period
  uint32_t rate_to_set_on_first_cnp_mbps = 0;       // 0: the first CNP decreases from the current rate
};

class DcqcnRate {
 public:
  static constexpr uint32_t kBurstBytes = 16'384;

  DcqcnRate() = default;
  explicit DcqcnRate(const DcqcnParameters& p) noexcept
      : p_(p), current_mbps_(p.max_rate_mbps), target_mbps_(p.max_rate_mbps) {}

  // False while the QP sends at line rate: nothing is paced and nothing else here need be called per packet.
  [[nodiscard]] bool limited() const noexcept { return limited_; }
  [[nodiscard]] uint32_t current_mbps() const noexcept { return current_mbps_; }
  [[nodiscard]] uint32_t target_mbps() const noexcept { return target_mbps_; }
  [[nodiscard]] uint32_t alpha() const noexcept { return static_cast<uint32_t>(alpha_q32_ >> 22); }  // of 1024

  // A CNP for this QP arrived (already checked against the connected path).
  void on_cnp(uint64_t now_ns) noexcept;
  // While limited(): advances the clocks to now_ns and says whether a packet may leave now. If not, it may at
  // next_send_ns().
  [[nodiscard]] bool may_send(uint64_t now_ns) noexcept;
  [[nodiscard]] uint64_t next_send_ns() const noexcept { return next_send_ns_; }
  // While limited(): a frame of `bytes` left at now_ns (after may_send() said it could).
  void on_sent(uint32_t bytes, uint64_t now_ns) noexcept;

 private:
  void advance(uint64_t now_ns) noexcept;
  void increase() noexcept;
  void increase_by_timer_over(uint64_t events) noexcept;
  void set_rate(uint32_t mbps) noexcept;

  DcqcnParameters p_{};
  bool limited_ = false;
  uint32_t current_mbps_ = 0;  // R_C
  uint32_t target_mbps_ = 0;   // R_T
  uint64_t alpha_q32_ = 0;     // α in 0.32 fixed point
  uint64_t alpha_period_start_ns_ = 0;
  bool cnp_in_alpha_period_ = false;
  uint64_t last_decrease_ns_ = 0;
  bool decreased_once_ = false;
  uint64_t timer_start_ns_ = 0;  // the rate-increase timer's current period began here
  uint64_t bytes_since_event_ = 0;
  uint32_t timer_count_ = 0;      // increase events from the timer since the last decrease
  uint32_t byte_count_ = 0;       // and from the byte counter
  uint64_t ns_per_byte_q16_ = 0;  // at current_mbps_
  uint64_t burst_ns_ = 0;         // kBurstBytes at current_mbps_
  uint64_t next_send_ns_ = 0;
};

}  // namespace uroce::proto
