// The provider behind ndk.h: one class per NDK object, implementing its dispatch table on the dataplane's
// engines and RC transport. Internal: consumers include only ndk.h.
//
// Object lifetimes (ndkpi.md §10.3) are reference counts (Lifetime): an object holds one reference on
// itself until its NdkCloseXxx, each successor holds one on each antecedent (QP -> PD, CQs, SRQ; MW -> the
// MR it is bound to; everything -> the adapter), and a CQ or SRQ with a notification queued or running
// holds one. The last reference to go destroys the object, then runs its close completion (if the close
// returned STATUS_PENDING), then lets go of its antecedents, so an antecedent's close never completes while
// a successor's close completion is still running.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/completion_slices.h"
#include "api/lam_registry.h"
#include "api/ndk.h"
#include "api/notifier.h"
#include "dataplane/dataplane.h"
#include "dataplane/rc_transport.h"

namespace uroce::ndk::detail {

// Limits we report in NdkAdapterInfo and enforce.
inline constexpr uint32_t kMaxCqDepth = 1u << 16;
inline constexpr uint32_t kMaxQueueDepth = 1u << 14;  // initiator, receive, SRQ
inline constexpr uint32_t kMaxSge = proto::kMaxSge;
inline constexpr uint32_t kMaxInlineDataSize = 512;
inline constexpr uint32_t kMaxTransferLength = 1u << 30;
inline constexpr uint64_t kMaxRegistrationSize = uint64_t{1} << 40;
inline constexpr uint32_t kPageSize = dataplane::kRegionPageSize;
inline constexpr uint32_t kFastRegisterPageCount = dataplane::kMaxRegionPages;  // per fast-register MR
inline constexpr uint32_t kLargeRequestThreshold = 64 * 1024;
inline constexpr uint32_t kMaxNotifiables = 8192;  // CQs + SRQs of the adapters sharing one Stack

class AdapterImpl;
class CqImpl;
class PdImpl;
class MrImpl;
class MwImpl;
class SrqImpl;
class QpImpl;
class ConnectionManager;

// A QP's queue sizes and limits, as NdkCreateQp / NdkCreateQpWithSrq give them.
struct QpShape {
  uint32_t receive_depth = 0;  // 0 with an SRQ
  uint32_t initiator_depth = 0;
  uint32_t max_receive_sge = 0;
  uint32_t max_initiator_sge = 0;
  uint32_t inline_size = 0;
};

class Lifetime {
 public:
  void retain() noexcept { references_.fetch_add(1, std::memory_order_relaxed); }
  // retain(), unless no reference is left (the object is being destroyed).
  [[nodiscard]] bool try_retain() noexcept {
    uint32_t n = references_.load(std::memory_order_relaxed);
    while (n != 0)
      if (references_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
    return false;
  }
  // acq_rel: everything a holder did happens before the destruction by whoever lets go last.
  void release() noexcept {
    if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) last_reference_gone();
  }

 protected:
  explicit Lifetime(Lifetime* antecedent) noexcept : antecedent_(antecedent) {
    if (antecedent_ != nullptr) antecedent_->retain();
  }
  virtual ~Lifetime() = default;

  // NdkCloseXxx: lets go of the object's own reference. STATUS_SUCCESS if that destroyed it (the completion
  // is not called), STATUS_PENDING if successors or a delivery still hold it (the completion runs when the
  // last lets go). A null completion waits for that instead and returns STATUS_SUCCESS.
  NTSTATUS close(CloseCompletion completion, void* context) noexcept;
  [[nodiscard]] bool closing() const noexcept { return closing_.load(std::memory_order_acquire); }
  // The adapter overrides this: it is not deleted by its last reference but by NdkCloseAdapter.
  virtual void last_reference_gone() noexcept;
  // An object whose destruction waits on an engine (a QP leaves its engine's tables) overrides this to hand
  // last_reference_gone() to a control thread and return true: a close with a completion then returns
  // STATUS_PENDING instead of waiting (ndkpi.md §3, §11: calls do not block).
  virtual bool destroy_elsewhere() noexcept { return false; }

 private:
  std::atomic<uint32_t> references_{1};
  std::atomic<bool> closing_{false};
  Lifetime* antecedent_;
  CloseCompletion completion_ = nullptr;
  void* completion_context_ = nullptr;
  std::atomic<bool>* waiter_ = nullptr;  // a close with a null completion waits on this
};

// One NDK object, counted on its adapter while it exists (UroceQueryResources): a member of each object class, so
// the count follows the object's construction and destruction, whichever path they take.
class LiveObject {
 public:
  LiveObject(AdapterImpl& adapter, NdkObjectType type) noexcept;
  ~LiveObject();
  LiveObject(const LiveObject&) = delete;
  LiveObject& operator=(const LiveObject&) = delete;

 private:
  AdapterImpl& adapter_;
  const NdkObjectType type_;
};

// What the adapters of one process share (ndkpi.md §1: many adapter instances may exist per NIC). DPDK's EAL runs
// one dataplane per process, so every adapter opened on the same configuration shares one Stack: its engines, RC
// transport (with its memory table, so PD numbers are the Stack's), notifier and connection manager. The first
// NdkOpenAdapter starts it, the last NdkCloseAdapter stops it; an open with a different configuration while one
// runs fails with a message saying so.
class Stack {
 public:
  // The running Stack if `config` is its configuration, else a new one if none runs; registers one adapter.
  [[nodiscard]] static NTSTATUS attach(const config::Config& config, std::shared_ptr<Stack>& out);
  // The adapter's close: the last one stops the Stack (under the registry's lock, so that no open meets a Stack
  // going down, or starts a second dataplane while the first still runs).
  static void detach(std::shared_ptr<Stack>& stack, bool asked_to_stop_polling);
  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;

  [[nodiscard]] dataplane::Dataplane& dataplane() noexcept { return *dataplane_; }
  [[nodiscard]] dataplane::RcTransport& transport() noexcept { return *transport_; }
  [[nodiscard]] Notifier& notifier() noexcept { return *notifier_; }
  [[nodiscard]] ConnectionManager& connections() noexcept { return *connections_; }
  [[nodiscard]] const NdkAdapterInfo& info() const noexcept { return info_; }
  [[nodiscard]] const config::Config& config() const noexcept { return dataplane_->config(); }
  uint32_t next_pd_id() noexcept { return next_pd_id_.fetch_add(1, std::memory_order_relaxed); }
  bool reserve_notifiable() noexcept;
  void release_notifiable() noexcept { notifiables_.fetch_sub(1, std::memory_order_relaxed); }
  dataplane::EngineId choose_engine(const GroupAffinity* affinity) noexcept;
  // The CPUs a CQ's or SRQ's callbacks may run on, from its affinity (0: anywhere).
  [[nodiscard]] uint64_t callback_cpus(const GroupAffinity* affinity) const noexcept;
  // UroceStopPolling from one adapter: the engines stop once every adapter sharing them has asked, and every CQ
  // and SRQ still open then fails fatally (nothing will complete on it any more).
  void stop_polling_requested();
  // The CQs and SRQs that exist, for that: enlisted once created, delisted by their destructor.
  void enlist(Notifiable& n);
  void delist(Notifiable& n);

 private:
  Stack() = default;
  NTSTATUS start(const config::Config& config);

  std::unique_ptr<dataplane::Dataplane> dataplane_;
  std::unique_ptr<dataplane::RcTransport> transport_;
  std::unique_ptr<Notifier> notifier_;
  std::unique_ptr<ConnectionManager> connections_;
  NdkAdapterInfo info_{};
  std::atomic<uint32_t> next_pd_id_{1};
  std::atomic<uint32_t> next_engine_{0};
  std::atomic<uint32_t> notifiables_{0};
  uint64_t allowed_cpus_ = 0;  // the CPUs (< 64) this process may run on, at start
  std::mutex live_mutex_;
  std::vector<Notifiable*> live_notifiables_;  // under live_mutex_
  std::mutex adapters_mutex_;
  uint32_t adapters_ = 0;       // attached
  uint32_t stop_requests_ = 0;  // of those, the ones that asked to stop polling
  friend class AdapterImpl;     // its UroceStopPolling takes adapters_mutex_
};

class AdapterImpl final : public Adapter, public Lifetime {
 public:
  static NTSTATUS open(const config::Config& config, NdkVersion version, AdapterImpl** adapter);
  void close();
  ~AdapterImpl() override;  // in adapter.cc, where ConnectionManager is complete

  NTSTATUS NdkQueryAdapterInfo(NdkAdapterInfo* info, uint32_t* buffer_size) override;
  NTSTATUS NdkCreateCq(uint32_t cq_depth, CqNotificationCallback notification, void* notification_context,
                       const GroupAffinity* affinity, CreateCompletion completion, void* request_context,
                       Cq** cq) override;
  NTSTATUS NdkCreatePd(CreateCompletion completion, void* request_context, Pd** pd) override;
  NTSTATUS NdkCreateSharedEndpoint(const sockaddr* address, uint32_t address_length, CreateCompletion completion,
                                   void* request_context, SharedEndpoint** endpoint) override;
  NTSTATUS NdkCreateConnector(CreateCompletion completion, void* request_context, Connector** connector) override;
  NTSTATUS NdkCreateListener(ConnectEventCallback connect_event, void* connect_event_context,
                             CreateCompletion completion, void* request_context, Listener** listener) override;
  NTSTATUS NdkBuildLam(const void* address, std::size_t length, RequestCompletion completion, void* request_context,
                       NdkLogicalAddressMapping* lam, uint32_t* lam_size, uint32_t* fbo) override;
  void NdkReleaseLam(NdkLogicalAddressMapping* lam) override;
  [[nodiscard]] GroupAffinity UroceEngineAffinity(uint16_t engine) const override;
  [[nodiscard]] uint16_t UroceEngineCount() const override;
  void UroceWaitForNotifier() override { stack_->notifier().wait_idle(); }
  // Stops this adapter's traffic: the engines it shares stop once every adapter sharing them has asked.
  void UroceStopPolling() override;
  UroceResourceCounts UroceQueryResources() override;

  [[nodiscard]] Stack& stack() noexcept { return *stack_; }
  [[nodiscard]] dataplane::Dataplane& dataplane() noexcept { return stack_->dataplane(); }
  [[nodiscard]] dataplane::RcTransport& transport() noexcept { return stack_->transport(); }
  [[nodiscard]] Notifier& notifier() noexcept { return stack_->notifier(); }
  [[nodiscard]] ConnectionManager& connections() noexcept { return stack_->connections(); }
  [[nodiscard]] const NdkAdapterInfo& info() const noexcept { return stack_->info(); }
  [[nodiscard]] const config::Config& config() const noexcept { return stack_->config(); }
  // What SGEs with a privileged token may name (lam_registry.h).
  [[nodiscard]] const LamRegistry& lams() const noexcept { return lams_; }
  uint32_t next_pd_id() noexcept { return stack_->next_pd_id(); }
  // Counts CQs and SRQs against the notifier queue's capacity.
  bool reserve_notifiable() noexcept { return stack_->reserve_notifiable(); }
  // The engine an affinity names (see NdkCreateCq in ndk.h); round-robin without one.
  dataplane::EngineId choose_engine(const GroupAffinity* affinity) noexcept { return stack_->choose_engine(affinity); }
  void release_notifiable() noexcept { stack_->release_notifiable(); }
  // LiveObject's counts. Relaxed: a close that returned happens after the destruction that counted it.
  void object_created(NdkObjectType type) noexcept { live_.at(type).fetch_add(1, std::memory_order_relaxed); }
  void object_destroyed(NdkObjectType type) noexcept { live_.at(type).fetch_sub(1, std::memory_order_relaxed); }

  // Runs `make` (returning {status, object}) now, or on the notifier with a completion (STATUS_PENDING).
  // `antecedent` stays referenced while the asynchronous create runs. `handed_over(object)` runs once a created
  // object is the consumer's: after *out is written, or just before the completion (which may close it) is called.
  template <class Object, class Make, class HandedOver = void (*)(Object*)>
  NTSTATUS create(
      Lifetime& antecedent, CreateCompletion completion, void* context, Object** out, Make&& make,
      HandedOver&& handed_over = [](Object*) {});

 private:
  AdapterImpl();
  void last_reference_gone() noexcept override { unreferenced_.store(true, std::memory_order_release); }

  std::shared_ptr<Stack> stack_;
  LamRegistry lams_;
  bool asked_to_stop_polling_ = false;  // UroceStopPolling (consumer threads; under the Stack's adapters_mutex_)
  std::atomic<bool> unreferenced_{false};
  std::array<std::atomic<uint32_t>, NdkObjectTypeSrq + 1> live_{};  // by NdkObjectType

  friend NTSTATUS uroce::ndk::NdkOpenAdapter(const config::Config&, NdkVersion, Adapter**);
};

inline LiveObject::LiveObject(AdapterImpl& adapter, NdkObjectType type) noexcept : adapter_(adapter), type_(type) {
  adapter_.object_created(type_);
}
inline LiveObject::~LiveObject() { adapter_.object_destroyed(type_); }

template <class Object, class Make, class HandedOver>
NTSTATUS AdapterImpl::create(Lifetime& antecedent, CreateCompletion completion, void* context, Object** out,
                             Make&& make, HandedOver&& handed_over) {
  if (completion == nullptr) {
    if (out == nullptr) return STATUS_INVALID_PARAMETER;
    // Not a structured binding: clang-tidy 14's analyzer cannot follow one, and then reports the object leaked
    // on a failure that `make` never returns an object with.
    const auto made = make();
    if (made.first == STATUS_SUCCESS) {
      *out = made.second;
      handed_over(made.second);
    }
    return made.first;
  }
  antecedent.retain();
  stack_->notifier().run([&antecedent, completion, context, make = std::forward<Make>(make),
                          handed_over = std::forward<HandedOver>(handed_over)]() mutable {
    auto [status, object] = make();
    if (status == STATUS_SUCCESS) handed_over(object);
    completion(context, status, status == STATUS_SUCCESS ? static_cast<ObjectHeader*>(object) : nullptr);
    antecedent.release();
  });
  return STATUS_PENDING;
}

class CqImpl final : public Cq, public Lifetime, public Notifiable {
 public:
  CqImpl(AdapterImpl& adapter, uint32_t depth, dataplane::EngineId home, CqNotificationCallback callback,
         void* callback_context);
  ~CqImpl() override;

  NTSTATUS NdkCloseCq(CloseCompletion completion, void* request_context) override;
  NTSTATUS NdkResizeCq(uint32_t cq_depth, RequestCompletion completion, void* request_context) override;
  void NdkArmCq(uint32_t notify_type) override;
  uint32_t NdkGetCqResults(NdkResult* results, uint32_t count) override;
  NTSTATUS NdkControlCqInterruptModeration(uint32_t interval_us, uint32_t count) override;
  uint32_t NdkGetCqResultsEx(NdkResultEx* results, uint32_t count) override;

  void deliver_notification() noexcept override;
  void retain_for_delivery() noexcept override { retain(); }
  void release_after_delivery() noexcept override { release(); }
  [[nodiscard]] bool retain_if_alive() noexcept override { return try_retain(); }
  void fail_fatally() noexcept override;
  [[nodiscard]] bool notification_due(uint64_t since_ns, uint64_t now_ns) noexcept override;

  [[nodiscard]] AdapterImpl& adapter() noexcept { return adapter_; }
  [[nodiscard]] dataplane::EngineId home_engine() const noexcept { return home_; }
  [[nodiscard]] uint32_t queued() const { return slices_.queued(); }  // consumer side (tests)
  // Overran (ndkpi.md §9.9): this CQ and every QP attached to it are unusable. Any thread.
  [[nodiscard]] bool failed() const noexcept { return slices_.failed(); }
  // Control path (QP create/close): the ring a QP on `engine` completes into, and the QPs to switch on resize.
  [[nodiscard]] std::mutex& attach_mutex() noexcept { return attach_mutex_; }
  [[nodiscard]] dataplane::CompletionQueue& ring(dataplane::EngineId engine) noexcept { return slices_.ring(engine); }
  void attach(QpImpl* qp);  // under attach_mutex()
  void detach(QpImpl* qp);

 private:
  // Consumer: up to `count` results, each made by `fill` from one entry.
  template <class Result, class Fill>
  uint32_t get_results(Result* results, uint32_t count, Fill&& fill);

  AdapterImpl& adapter_;
  CompletionSlices slices_;
  const dataplane::EngineId home_;
  const CqNotificationCallback callback_;
  void* const callback_context_;
  bool overrun_notified_ = false;  // notifier-only (deliveries are serialised)
  // Interrupt moderation, written by NdkControlCqInterruptModeration and read by the notifier (relaxed: the
  // newest call wins, and may apply a little later). Interval in ns, kNoLimit for none; 0: moderation off.
  static constexpr uint64_t kNoLimit = UINT64_MAX;
  std::atomic<uint64_t> moderation_interval_ns_{0};
  std::atomic<uint32_t> moderation_count_{0};  // completions to gather; 0 or 1: off; UINT32_MAX: none
  std::atomic<uint32_t> depth_;                // as created or resized (a count above it means none)
  std::mutex attach_mutex_;                    // control path only: QP attach/detach and resize
  std::vector<QpImpl*> qps_;
  LiveObject live_{adapter_, NdkObjectTypeCq};
};

class PdImpl final : public Pd, public Lifetime {
 public:
  explicit PdImpl(AdapterImpl& adapter)
      : Pd(kNdkVersion, NdkObjectTypePd), Lifetime(&adapter), adapter_(adapter), id_(adapter.next_pd_id()) {}
  ~PdImpl() override;

  NTSTATUS NdkClosePd(CloseCompletion completion, void* request_context) override {
    return close(completion, request_context);
  }
  NTSTATUS NdkCreateMr(bool fast_register, CreateCompletion completion, void* request_context, Mr** mr) override;
  NTSTATUS NdkCreateMw(CreateCompletion completion, void* request_context, Mw** mw) override;
  NTSTATUS NdkCreateSrq(uint32_t srq_depth, uint32_t max_receive_request_sge, uint32_t notify_threshold,
                        SrqNotificationCallback notification, void* notification_context, const GroupAffinity* affinity,
                        CreateCompletion completion, void* request_context, Srq** srq) override;
  NTSTATUS NdkCreateQp(Cq* receive_cq, Cq* initiator_cq, void* qp_context, uint32_t receive_queue_depth,
                       uint32_t initiator_queue_depth, uint32_t max_receive_request_sge,
                       uint32_t max_initiator_request_sge, uint32_t inline_data_size, CreateCompletion completion,
                       void* request_context, Qp** qp) override;
  NTSTATUS NdkCreateQpWithSrq(Cq* receive_cq, Cq* initiator_cq, Srq* srq, void* qp_context,
                              uint32_t initiator_queue_depth, uint32_t max_initiator_request_sge,
                              uint32_t inline_data_size, CreateCompletion completion, void* request_context,
                              Qp** qp) override;
  void NdkGetPrivilegedMemoryRegionToken(uint32_t* token) override;

  [[nodiscard]] AdapterImpl& adapter() noexcept { return adapter_; }
  [[nodiscard]] uint32_t id() const noexcept { return id_; }
  // Posting threads: STATUS_ACCESS_VIOLATION if an SGE carrying this PD's privileged token names memory no live
  // NdkBuildLam mapping covers (writable ones where the engines will write), else STATUS_SUCCESS.
  [[nodiscard]] NTSTATUS check_privileged_sges(const NdkSge* sgl, uint32_t count, bool engines_write) const;

 private:
  NTSTATUS create_qp(CqImpl& receive_cq, CqImpl& initiator_cq, SrqImpl* srq, void* qp_context, const QpShape& shape,
                     CreateCompletion completion, void* request_context, Qp** qp);

  AdapterImpl& adapter_;
  const uint32_t id_;
  std::atomic<uint32_t> privileged_token_{0};  // registered at the first ask, kept until the PD is destroyed
  LiveObject live_{adapter_, NdkObjectTypePd};
};

class MrImpl final : public Mr, public Lifetime {
 public:
  MrImpl(PdImpl& pd, bool fast_register)
      : Mr(kNdkVersion, NdkObjectTypeMr), Lifetime(&pd), pd_(pd), fast_register_(fast_register) {}
  ~MrImpl() override;

  NTSTATUS NdkCloseMr(CloseCompletion completion, void* request_context) override {
    return close(completion, request_context);
  }
  NTSTATUS NdkRegisterMr(void* address, std::size_t length, uint32_t flags, RequestCompletion completion,
                         void* request_context) override;
  NTSTATUS NdkDeregisterMr(RequestCompletion completion, void* request_context) override;
  NTSTATUS NdkInitializeFastRegisterMr(uint32_t adapter_page_count, bool remote_access, RequestCompletion completion,
                                       void* request_context) override;
  uint32_t NdkGetRemoteTokenFromMr() override { return token(); }
  uint32_t NdkGetLocalTokenFromMr() override { return token(); }

  [[nodiscard]] PdImpl& pd() noexcept { return pd_; }
  [[nodiscard]] bool fast_register() const noexcept { return fast_register_; }
  [[nodiscard]] uint32_t token() const noexcept { return token_.load(std::memory_order_relaxed); }
  // A registered (non-fast-register) MR: its range and proto::Access rights, for NdkBind's inline checks.
  [[nodiscard]] bool registered() const noexcept { return registered_.load(std::memory_order_acquire); }
  [[nodiscard]] uint64_t address() const noexcept { return address_; }
  [[nodiscard]] uint64_t length() const noexcept { return length_; }
  [[nodiscard]] uint32_t access() const noexcept { return access_; }
  // Fast register: pages it was initialised for (0: not initialised) and whether remote rights may be granted.
  [[nodiscard]] uint32_t page_capacity() const noexcept { return page_capacity_.load(std::memory_order_acquire); }
  [[nodiscard]] bool remote_access() const noexcept { return remote_access_.load(std::memory_order_relaxed); }
  // NdkFastRegister: the token the next registration gets (same slot, next key byte), taken at post time.
  uint32_t next_token() noexcept;

  // A registration above this with a completion routine checks its pages off the caller's thread (NdkRegisterMr).
  static constexpr std::size_t kInlineRegistrationLimit = std::size_t{1} << 20;

 private:
  void release_slot() noexcept;
  NTSTATUS register_pages(void* address, std::size_t length, uint32_t flags);

  PdImpl& pd_;
  const bool fast_register_;
  std::atomic<uint32_t> token_{0};
  std::atomic<bool> registered_{false};
  std::atomic<bool> registering_{false};  // a registration was started: taken by NdkRegisterMr, given back when
                                          // it fails or the MR is deregistered
  std::atomic<uint32_t> page_capacity_{0};
  uint64_t address_ = 0;
  uint64_t length_ = 0;
  uint32_t access_ = 0;
  std::atomic<bool> remote_access_{false};  // NdkInitializeFastRegisterMr may run on several threads at once
  LiveObject live_{pd_.adapter(), NdkObjectTypeMr};
};

class MwImpl final : public Mw, public Lifetime {
 public:
  MwImpl(PdImpl& pd, uint32_t token) : Mw(kNdkVersion, NdkObjectTypeMw), Lifetime(&pd), pd_(pd), token_(token) {}
  ~MwImpl() override;

  NTSTATUS NdkCloseMw(CloseCompletion completion, void* request_context) override {
    return close(completion, request_context);
  }
  uint32_t NdkGetRemoteTokenFromMw() override { return token(); }

  [[nodiscard]] PdImpl& pd() noexcept { return pd_; }
  [[nodiscard]] uint32_t token() const noexcept { return token_.load(std::memory_order_relaxed); }
  // NdkBind (the initiator-queue poster): a new token, and the MR -> MW link (the MR's close waits for ours).
  uint32_t bind_to(MrImpl& mr) noexcept;

 private:
  PdImpl& pd_;
  std::atomic<uint32_t> token_;
  std::atomic<MrImpl*> bound_{nullptr};
  LiveObject live_{pd_.adapter(), NdkObjectTypeMw};
};

class SrqImpl final : public Srq, public Lifetime, public Notifiable {
 public:
  SrqImpl(PdImpl& pd, uint32_t depth, uint32_t max_sge, dataplane::EngineId engine, SrqNotificationCallback callback,
          void* callback_context);
  ~SrqImpl() override;

  NTSTATUS NdkCloseSrq(CloseCompletion completion, void* request_context) override;
  NTSTATUS NdkModifySrq(uint32_t srq_depth, uint32_t notify_threshold, RequestCompletion completion,
                        void* request_context) override;
  NTSTATUS NdkSrqReceive(void* request_context, const NdkSge* sgl, uint32_t sge_count) override;

  void deliver_notification() noexcept override;
  void retain_for_delivery() noexcept override { retain(); }
  void release_after_delivery() noexcept override { release(); }
  [[nodiscard]] bool retain_if_alive() noexcept override { return try_retain(); }
  void fail_fatally() noexcept override;

  [[nodiscard]] PdImpl& pd() noexcept { return pd_; }
  [[nodiscard]] dataplane::EngineId engine() const noexcept { return engine_; }
  // The first ring: QPs start there and follow the successors a growth links (dataplane::SpscQueue).
  [[nodiscard]] dataplane::ReceiveQueue& ring() noexcept { return *first_; }
  [[nodiscard]] dataplane::ReceiveLimitEvents& limit_events() noexcept { return limit_; }
  void arm_limit(uint32_t threshold) noexcept;

 private:
  // Receives posted and not yet taken, over every ring still holding some. Any thread.
  [[nodiscard]] uint32_t posted() const noexcept;

  PdImpl& pd_;
  // Every ring the SRQ had, oldest first, kept until it closes (growths are rare and each at least doubles).
  // Control path (NdkModifySrq, under grow_mutex_, which also serialises its depth_ updates) appends; the poster
  // links and posts.
  std::vector<std::unique_ptr<dataplane::ReceiveQueue>> rings_;
  std::mutex grow_mutex_;
  uint32_t capacity_ = 0;  // of the newest ring, adopted or not (under grow_mutex_)
  // A larger ring NdkModifySrq made for the poster to adopt at its next NdkSrqReceive (so that only the poster
  // ever writes a ring or links one): released before the depth that needs it.
  std::atomic<dataplane::ReceiveQueue*> grown_{nullptr};
  dataplane::ReceiveLimitEvents limit_;
  const dataplane::EngineId engine_;
  const uint32_t max_sge_;
  std::atomic<uint32_t> depth_;
  const SrqNotificationCallback callback_;
  void* const callback_context_;
  std::atomic<bool> fatal_{false};             // fail_fatally(): the SRQ is dead (release; read with acquire)
  bool fatal_notified_ = false;                // notifier-only (deliveries are serialised)
  dataplane::ReceiveQueue* first_ = nullptr;   // rings_.front(), set once (QPs read it while rings_ grows)
  dataplane::ReceiveQueue* ring_ = nullptr;    // the receive poster's ring
  dataplane::ReceiveQueue* oldest_ = nullptr;  // the poster's oldest ring that may still hold receives
  uint32_t written_ = 0;                       // the receive poster's private tail in ring_
  LiveObject live_{pd_.adapter(), NdkObjectTypeSrq};
};

class QpImpl final : public Qp, public Lifetime {
 public:
  using Shape = QpShape;
  QpImpl(PdImpl& pd, CqImpl& receive_cq, CqImpl& initiator_cq, SrqImpl* srq, void* context, const Shape& shape);
  ~QpImpl() override;
  // Control path, after construction: the transport QP on `engine`. STATUS_SUCCESS or a failure.
  NTSTATUS start();
  [[nodiscard]] const AdapterImpl& adapter() const noexcept { return adapter_; }

  NTSTATUS NdkCloseQp(CloseCompletion completion, void* request_context) override;
  void NdkFlush() override;
  NTSTATUS NdkSend(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags) override;
  NTSTATUS NdkReceive(void* request_context, const NdkSge* sgl, uint32_t sge_count) override;
  NTSTATUS NdkBind(void* request_context, Mr* mr, Mw* mw, void* virtual_address, std::size_t length,
                   uint32_t flags) override;
  NTSTATUS NdkFastRegister(void* request_context, Mr* mr, uint32_t adapter_page_count,
                           const NdkLogicalAddress* adapter_page_array, uint32_t fbo, std::size_t length,
                           void* base_virtual_address, uint32_t flags) override;
  NTSTATUS NdkInvalidate(void* request_context, ObjectHeader* mr_or_mw, uint32_t flags) override;
  NTSTATUS NdkRead(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint64_t remote_address,
                   uint32_t remote_token, uint32_t flags) override;
  NTSTATUS NdkWrite(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint64_t remote_address,
                    uint32_t remote_token, uint32_t flags) override;
  NTSTATUS NdkSendAndInvalidate(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags,
                                uint32_t remote_token) override;
  uint32_t UroceGetQpNumber() override;
  NTSTATUS UroceConnect(const UroceConnectAttributes& attributes, RequestCompletion completion,
                        void* request_context) override;

  // Connection management (connection.cc): claims the QP for one connection (false: it is connecting, connected
  // or flushed); connects its transport to `peer` (resolving the MAC unless given), giving the claim back on
  // failure; or gives the claim back.
  [[nodiscard]] bool claim_for_connect() noexcept;
  NTSTATUS connect_transport(dataplane::RcPeer peer, const proto::RcQpAttributes& attrs);
  void release_connect_claim() noexcept;
  [[nodiscard]] proto::RcQpAttributes default_attributes() const;
  [[nodiscard]] bool connected() const noexcept { return connected_.load(std::memory_order_acquire); }

  [[nodiscard]] dataplane::RcQueuePair* transport_qp() noexcept { return transport_qp_; }
  [[nodiscard]] dataplane::EngineId engine() const noexcept { return engine_; }
  [[nodiscard]] CqImpl& receive_cq() noexcept { return receive_cq_; }
  [[nodiscard]] CqImpl& initiator_cq() noexcept { return initiator_cq_; }
  // What the engine sees of the send queue (tests: DEFER keeps it unchanged).
  [[nodiscard]] uint32_t published_send_tail() const noexcept { return sq_.producer_tail(); }

 private:
  // The transport QP leaves its engine's tables on the engine (RcTransport::destroy_qp): on the notifier's arena.
  bool destroy_elsewhere() noexcept override;
  NTSTATUS connect(const UroceConnectAttributes& attributes);
  // The initiator-queue post protocol: check, fill the next slot, then commit (publish + doorbell unless
  // DEFER) or fail (publish what DEFER held back first: ndkpi.md §10.6).
  NTSTATUS post_transfer(proto::WorkOp op, void* context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags,
                         uint32_t allowed_flags, uint64_t remote_address, uint32_t remote_token,
                         uint32_t invalidate_token);
  NTSTATUS check_initiator_post(uint32_t flags, uint32_t allowed_flags);
  // A CQ of ours overran: the QP is unusable (ndkpi.md §9.9).
  [[nodiscard]] bool cq_failed() const noexcept { return initiator_cq_.failed() || receive_cq_.failed(); }
  proto::SendWqe& next_send_slot(void* context, proto::WorkOp op, uint32_t flags) noexcept;
  NTSTATUS commit_send(uint32_t flags) noexcept;
  NTSTATUS fail_send(NTSTATUS status) noexcept;
  void publish_sends() noexcept;
  [[nodiscard]] uint32_t written() const noexcept { return sq_written_.load(std::memory_order_relaxed); }

  AdapterImpl& adapter_;
  PdImpl& pd_;
  CqImpl& receive_cq_;
  CqImpl& initiator_cq_;
  SrqImpl* const srq_;
  void* const context_;
  const Shape shape_;
  const dataplane::EngineId engine_;
  dataplane::SendQueue sq_;
  std::unique_ptr<dataplane::ReceiveQueue> rq_;  // none with an SRQ
  std::unique_ptr<uint8_t[]> inline_data_;       // one inline_stride_ block per SQ slot
  uint32_t inline_stride_ = 0;
  dataplane::RcQueuePair* transport_qp_ = nullptr;
  std::atomic<bool> connected_{false};
  std::atomic<bool> flushed_{false};
  std::atomic<bool> connecting_{false};
  // Poster-private tails, on separate lines: one thread posts sends while another posts receives. NdkFlush reads
  // the send tail too (it submits the DEFER chain), so it is atomic: the poster stores it with release once the
  // WQE is written (commit_send), and reads its own value relaxed (written()).
  alignas(kCacheLine) std::atomic<uint32_t> sq_written_{0};
  alignas(kCacheLine) uint32_t rq_written_ = 0;
  LiveObject live_{adapter_, NdkObjectTypeQp};
};

}  // namespace uroce::ndk::detail
