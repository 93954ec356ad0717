#include "proto/dcqcn.h"

#include <algorithm>

namespace uroce::proto {

namespace {

constexpr uint32_t kMaxEventsPerAdvance = 64;  // one by one per call; the timer's further ones in closed form

uint64_t mul_q32(uint64_t a, uint64_t b) noexcept {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 32);
}

// x^n for x in 0.32 fixed point (x < 1), by squaring: log2(n) multiplies however long the QP was quiet.
uint64_t pow_q32(uint64_t x, uint64_t n) noexcept {
  uint64_t result = uint64_t{1} << 32;
  while (n != 0 && result != 0) {
    if (n & 1) result = mul_q32(result, x);
    x = mul_q32(x, x);
    n >>= 1;
  }
  return result;
}

// A gain of g/1024 in 0.32 fixed point.
constexpr uint64_t of_1024_q32(uint32_t g) noexcept { return uint64_t{g} << 22; }

}  // namespace

void DcqcnRate::set_rate(uint32_t mbps) noexcept {
  current_mbps_ = std::clamp(mbps, std::max(p_.min_rate_mbps, 1u), p_.max_rate_mbps);
  // 8 bits per byte, 1000 ns per us: a byte takes 8000 / Mb/s nanoseconds.
  ns_per_byte_q16_ = (uint64_t{8000} << 16) / current_mbps_;
  burst_ns_ = (uint64_t{kBurstBytes} * ns_per_byte_q16_) >> 16;
}

// The paper's rate decrease, at most once per rate_reduce_monitor_period: R_T = R_C, R_C = R_C (1 - α/2), with the
// cut no deeper than rpg_min_dec_fac. The increase stages start again from fast recovery.
void DcqcnRate::on_cnp(uint64_t now_ns) noexcept {
  if (!limited_) {
    limited_ = true;
    alpha_q32_ = of_1024_q32(std::min(p_.initial_alpha_value, 1023u));
    alpha_period_start_ns_ = now_ns;
    cnp_in_alpha_period_ = false;  // the initial value stands for this period's update
    next_send_ns_ = now_ns;
    decreased_once_ = false;
    set_rate(current_mbps_);
    if (p_.rate_to_set_on_first_cnp_mbps != 0) {
      target_mbps_ = current_mbps_;
      set_rate(p_.rate_to_set_on_first_cnp_mbps);
      decreased_once_ = true;
      last_decrease_ns_ = now_ns;
    }
  } else {
    advance(now_ns);
    if (!limited_) {  // the increase just finished recovering: this CNP starts a new episode
      on_cnp(now_ns);
      return;
    }
    cnp_in_alpha_period_ = true;
  }
  timer_start_ns_ = now_ns;
  bytes_since_event_ = 0;
  timer_count_ = byte_count_ = 0;
  if (decreased_once_ && now_ns - last_decrease_ns_ < p_.rate_reduce_monitor_period_ns) return;
  decreased_once_ = true;
  last_decrease_ns_ = now_ns;
  target_mbps_ = current_mbps_;
  const uint64_t cut_q32 = std::min(alpha_q32_ / 2, (uint64_t{p_.min_dec_fac} << 32) / 100);
  set_rate(static_cast<uint32_t>(mul_q32(current_mbps_, (uint64_t{1} << 32) - cut_q32)));
}

void DcqcnRate::advance(uint64_t now_ns) noexcept {
  // α: one update per dce_tcp_rtt period, raised by a CNP in that period, decaying otherwise.
  const uint64_t alpha_period = std::max(p_.dce_tcp_rtt_ns, 1u);
  if (now_ns - alpha_period_start_ns_ >= alpha_period) {
    uint64_t periods = (now_ns - alpha_period_start_ns_) / alpha_period;
    alpha_period_start_ns_ += periods * alpha_period;
    const uint64_t g = of_1024_q32(std::min(p_.dce_tcp_g, 1024u));
    if (cnp_in_alpha_period_) {
      alpha_q32_ = mul_q32(alpha_q32_, g) + ((uint64_t{1} << 32) - g);
      cnp_in_alpha_period_ = false;
      --periods;
    }
    alpha_q32_ = mul_q32(alpha_q32_, pow_q32(g, periods));
  }
  // The rate-increase timer: each expiry is one increase event.
  const uint64_t period = std::max(p_.time_reset_ns, 1u);
  if (now_ns - timer_start_ns_ >= period) {
    const uint64_t expiries = (now_ns - timer_start_ns_) / period;
    timer_start_ns_ += expiries * period;
    const uint64_t one_by_one = std::min<uint64_t>(expiries, kMaxEventsPerAdvance);
    for (uint64_t i = 0; i < one_by_one && limited_; ++i) {
      ++timer_count_;
      increase();
    }
    if (limited_ && expiries > one_by_one) increase_by_timer_over(expiries - one_by_one);
  }
}

// The timer's increase events past the first kMaxEventsPerAdvance of one advance (a QP quiet for longer than 64
// periods T), in closed form: they count as much as one by one would, or the QP would stay throttled long after
// the congestion ended. By then R_C has caught R_T up (each event halves their gap), so R_C takes R_T, which grows
// by one step per event: R_AI, or R_HAI times the hyper stage (its step once the timer's count passed the byte
// counter's, which a quiet QP keeps; a lower bound before that).
void DcqcnRate::increase_by_timer_over(uint64_t events) noexcept {
  const uint32_t f = p_.threshold;
  timer_count_ = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{timer_count_} + events, UINT32_MAX));
  uint64_t step = 0;
  if (timer_count_ >= f && byte_count_ >= f) {
    step = uint64_t{std::min(timer_count_, byte_count_) - f + 1} * p_.hai_rate_mbps;
  } else if (timer_count_ >= f) {
    step = p_.ai_rate_mbps;
  }
  // events < 2^64 / period and step < 2^32 * 2^32: the product is computed saturated against the line rate.
  const uint64_t room = p_.max_rate_mbps - std::min<uint64_t>(target_mbps_, p_.max_rate_mbps);
  const uint64_t gain = step == 0 ? 0 : (events >= room / step + 1 ? room : events * step);
  target_mbps_ = static_cast<uint32_t>(std::min<uint64_t>(uint64_t{target_mbps_} + gain, p_.max_rate_mbps));
  set_rate(std::max(target_mbps_, current_mbps_));
  if (current_mbps_ >= p_.max_rate_mbps) limited_ = false;  // back at line rate: the limiter is off
}

// One increase event: fast recovery towards R_T while both stage counters are below F, additive increase of R_T
// once one of them reaches F, hyper increase once both have.
void DcqcnRate::increase() noexcept {
  const uint32_t f = p_.threshold;
  uint64_t target = target_mbps_;
  if (timer_count_ >= f && byte_count_ >= f) {
    target += uint64_t{std::min(timer_count_, byte_count_) - f + 1} * p_.hai_rate_mbps;
  } else if (timer_count_ >= f || byte_count_ >= f) {
    target += p_.ai_rate_mbps;
  }
  target_mbps_ = static_cast<uint32_t>(std::min<uint64_t>(target, p_.max_rate_mbps));
  // Rounded up, so that R_C reaches R_T instead of creeping towards it.
  set_rate(static_cast<uint32_t>((uint64_t{target_mbps_} + current_mbps_ + 1) / 2));
  if (current_mbps_ >= p_.max_rate_mbps) limited_ = false;  // back at line rate: the limiter is off
}

bool DcqcnRate::may_send(uint64_t now_ns) noexcept {
  advance(now_ns);
  return !limited_ || next_send_ns_ <= now_ns;
}

void DcqcnRate::on_sent(uint32_t bytes, uint64_t now_ns) noexcept {
  // A QP that was quiet may send kBurstBytes at once, no more: the bucket holds that much credit at most.
  const uint64_t earliest = now_ns > burst_ns_ ? now_ns - burst_ns_ : 0;
  next_send_ns_ = std::max(next_send_ns_, earliest) + ((uint64_t{bytes} * ns_per_byte_q16_) >> 16);
  bytes_since_event_ += bytes;
  if (bytes_since_event_ >= p_.byte_reset && p_.byte_reset != 0) {
    const uint64_t events = bytes_since_event_ / p_.byte_reset;
    bytes_since_event_ -= events * p_.byte_reset;
    for (uint64_t i = 0; i < std::min<uint64_t>(events, kMaxEventsPerAdvance) && limited_; ++i) {
      ++byte_count_;
      increase();
    }
  }
}

}  // namespace uroce::proto
