// The adapter (open, query, create CQ/PD, close) and object lifetimes.
#include <chrono>
#include <cstdio>
#include <thread>

#include "api/connection.h"
#include "api/cpu_access.h"
#include "api/provider.h"

namespace uroce::ndk {

using detail::AdapterImpl;

NTSTATUS NdkOpenAdapter(const config::Config& config, NdkVersion version, Adapter** adapter) {
  if (adapter == nullptr) return STATUS_INVALID_PARAMETER;
  AdapterImpl* impl = nullptr;
  const NTSTATUS status = AdapterImpl::open(config, version, &impl);
  if (status == STATUS_SUCCESS) *adapter = impl;
  return status;
}

void NdkCloseAdapter(Adapter* adapter) {
  if (adapter != nullptr) static_cast<AdapterImpl*>(adapter)->close();
}

namespace detail {

namespace {

void wait_until(const std::atomic<bool>& flag) {
  for (unsigned spins = 0; !flag.load(std::memory_order_acquire); ++spins) {
    if (spins < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

// ------------------------------------------------------------------------------------------------ Lifetime

NTSTATUS Lifetime::close(CloseCompletion completion, void* context) noexcept {
  std::atomic<bool> closed{false};
  if (completion != nullptr) {
    completion_ = completion;
    completion_context_ = context;
  } else {
    waiter_ = &closed;
  }
  closing_.store(true, std::memory_order_release);
  // acq_rel: whoever lets go last sees completion_/waiter_ set above.
  if (references_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (completion != nullptr && destroy_elsewhere()) return STATUS_PENDING;  // the completion runs there
    completion_ = nullptr;  // finished inline: STATUS_SUCCESS means the completion is never called
    waiter_ = nullptr;
    last_reference_gone();
    return STATUS_SUCCESS;
  }
  if (completion != nullptr) return STATUS_PENDING;
  wait_until(closed);
  return STATUS_SUCCESS;
}

void Lifetime::last_reference_gone() noexcept {
  Lifetime* const antecedent = antecedent_;
  const CloseCompletion completion = completion_;
  void* const context = completion_context_;
  std::atomic<bool>* const waiter = waiter_;
  delete this;
  // The consumer's completion runs before the antecedent may complete its own close (ndkpi.md §10.3);
  // a waiting close returns only after the antecedent let go, so the caller can close that next.
  if (completion != nullptr) completion(context);
  if (antecedent != nullptr) antecedent->release();
  if (waiter != nullptr) waiter->store(true, std::memory_order_release);
}

// ------------------------------------------------------------------------------------------------- Adapter

// ------------------------------------------------------------------------------------------------- Stack

namespace {

// The Stack the process's adapters share, if one runs. Opens and last closes take the mutex, so a Stack is
// started and stopped by one thread at a time (DPDK's EAL is initialised once per process).
std::mutex stack_registry_mutex;
std::weak_ptr<Stack> stack_registry;

}  // namespace

NTSTATUS Stack::attach(const config::Config& config, std::shared_ptr<Stack>& out) {
  const std::lock_guard lock(stack_registry_mutex);
  std::shared_ptr<Stack> stack = stack_registry.lock();
  if (stack != nullptr && !(stack->config() == config)) {
    std::fprintf(stderr,
                 "uroce: NdkOpenAdapter: an adapter of this process already runs on another configuration; DPDK "
                 "serves one dataplane per process, so every adapter of a process opens on the same configuration\n");
    return STATUS_INSUFFICIENT_RESOURCES;
  }
  if (stack == nullptr) {
    stack.reset(new Stack());
    if (const NTSTATUS status = stack->start(config); status != STATUS_SUCCESS) return status;
    stack_registry = stack;
  }
  {
    const std::lock_guard adapters(stack->adapters_mutex_);
    ++stack->adapters_;
  }
  out = std::move(stack);
  return STATUS_SUCCESS;
}

void Stack::detach(std::shared_ptr<Stack>& stack, bool asked_to_stop_polling) {
  const std::lock_guard lock(stack_registry_mutex);
  {
    const std::lock_guard adapters(stack->adapters_mutex_);
    --stack->adapters_;
    if (asked_to_stop_polling) --stack->stop_requests_;
    // The adapters left may all have asked already.
    if (stack->adapters_ != 0 && stack->stop_requests_ >= stack->adapters_) stack->dataplane_->stop_engines();
  }
  stack.reset();  // the last adapter's: ~Stack runs here, under the registry's lock
}

NTSTATUS Stack::start(const config::Config& config) {
  auto dp = dataplane::Dataplane::start(config);
  if (!dp.ok()) {
    std::fprintf(stderr, "uroce: NdkOpenAdapter: %s\n", dp.error().c_str());
    return STATUS_INSUFFICIENT_RESOURCES;
  }
  dataplane_ = std::move(dp.value());
  auto transport = dataplane::RcTransport::start(*dataplane_);
  if (!transport.ok()) {
    std::fprintf(stderr, "uroce: NdkOpenAdapter: %s\n", transport.error().c_str());
    return STATUS_INSUFFICIENT_RESOURCES;
  }
  transport_ = std::move(transport.value());
  notifier_ = std::make_unique<Notifier>(kMaxNotifiables);
  for (const unsigned cpu : config::process_allowed_cpus())
    if (cpu < 64) allowed_cpus_ |= uint64_t{1} << cpu;
  std::string error;
  connections_ = ConnectionManager::start(*this, error);
  if (!connections_) {
    std::fprintf(stderr, "uroce: NdkOpenAdapter: connection management: %s\n", error.c_str());
    return STATUS_INSUFFICIENT_RESOURCES;
  }

  NdkAdapterInfo& i = info_;
  i.Version = kNdkVersion;
  i.MaxRegistrationSize = kMaxRegistrationSize;
  i.MaxWindowSize = kMaxRegistrationSize;
  i.FRMRPageCount = kFastRegisterPageCount;
  i.MaxInitiatorRequestSge = kMaxSge;
  i.MaxReceiveRequestSge = kMaxSge;
  i.MaxReadRequestSge = kMaxSge;
  i.MaxTransferLength = kMaxTransferLength;
  i.MaxInlineDataSize = kMaxInlineDataSize;
  i.MaxInboundReadLimit = config.rdma.max_dest_rd_atomic;
  i.MaxOutboundReadLimit = config.rdma.max_rd_atomic;
  i.MaxReceiveQueueDepth = kMaxQueueDepth;
  i.MaxInitiatorQueueDepth = kMaxQueueDepth;
  i.MaxSrqDepth = kMaxQueueDepth;
  i.MaxCqDepth = kMaxCqDepth;
  i.LargeRequestThreshold = kLargeRequestThreshold;
  // ndkpi.md §11: the RDMA CM leaves 56 bytes of a REQ's private data to the consumer; a REJ carries 148 (a REP
  // 196: the callee's limit covers both of its answers).
  i.MaxCallerData = static_cast<uint32_t>(proto::kRdmaCmReqPrivateDataMax);
  i.MaxCalleeData = static_cast<uint32_t>(proto::kRdmaCmRejPrivateDataMax);
  // In order: the responder places a message's packets in PSN order. RoCE needs no read-sink rights
  // (ndkpi.md §11). Resize and interrupt moderation are supported; READ with local invalidate and loopback to
  // our own address are not.
  i.AdapterFlags = NDK_ADAPTER_FLAG_IN_ORDER_DMA_SUPPORTED | NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED |
                   NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED | NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED |
                   (dataplane_->engine_count() > 1 ? NDK_ADAPTER_FLAG_MULTI_ENGINE_SUPPORTED : 0u);
  i.RdmaTechnology = NdkRoCEv2;
  return STATUS_SUCCESS;
}

// Every adapter has closed, so nothing of theirs is left: the connection manager's thread and the GSI QP go
// first, then the notifier and the engines. A Stack whose start failed part way takes down what it started.
Stack::~Stack() {
  connections_.reset();
  if (notifier_) notifier_->stop();
  transport_.reset();
  if (dataplane_) dataplane_->stop();
}

void Stack::stop_polling_requested() {
  // Called with adapters_mutex_ held (AdapterImpl::UroceStopPolling).
  if (++stop_requests_ < adapters_) return;
  dataplane_->stop_engines();
  // Nothing completes any more: every CQ and SRQ still open fails fatally (ndkpi.md §9.9 INTERNAL_ERROR), so a
  // consumer waiting for a notification hears of it instead of waiting for ever. Each is held while it is told
  // (retain_if_alive skips one whose destruction has begun), outside live_mutex_, which its destructor takes.
  std::vector<Notifiable*> live;
  {
    const std::lock_guard lock(live_mutex_);
    for (Notifiable* n : live_notifiables_)
      if (n->retain_if_alive()) live.push_back(n);
  }
  for (Notifiable* n : live) {
    n->fail_fatally();
    n->release_after_delivery();
  }
}

void Stack::enlist(Notifiable& n) {
  const std::lock_guard lock(live_mutex_);
  live_notifiables_.push_back(&n);
}

void Stack::delist(Notifiable& n) {
  const std::lock_guard lock(live_mutex_);
  std::erase(live_notifiables_, &n);
}

// The first engine whose CPU the affinity names; else the lowest named CPU modulo the engine count; no
// affinity: round-robin. (Engines sharing one CPU cannot be told apart: the first wins.)
dataplane::EngineId Stack::choose_engine(const GroupAffinity* affinity) noexcept {
  const auto engines = static_cast<uint32_t>(dataplane_->engine_count());
  if (engines <= 1) return 0;  // nothing to choose (Dataplane::start refuses an empty eal.lcores)
  if (affinity == nullptr || affinity->Mask == 0 || affinity->Group != 0)
    return static_cast<dataplane::EngineId>(next_engine_.fetch_add(1, std::memory_order_relaxed) % engines);
  const auto& cpus = dataplane_->config().eal.lcores;
  for (uint32_t e = 0; e < engines && e < cpus.size(); ++e)
    if (cpus[e] < 64 && (affinity->Mask >> cpus[e]) & 1) return static_cast<dataplane::EngineId>(e);
  return static_cast<dataplane::EngineId>(static_cast<uint32_t>(__builtin_ctzll(affinity->Mask)) % engines);
}

// NdkCreateCq's Affinity: the processors the consumer prefers for the object's callbacks, honoured where it does
// no harm: only CPUs this process may run on (group 0, the first 64), and not the cores of busy-polling engines,
// where a callback thread would take turns with a spinning engine. None left, or no affinity: 0 (unpinned).
uint64_t Stack::callback_cpus(const GroupAffinity* affinity) const noexcept {
  if (affinity == nullptr || affinity->Group != 0) return 0;
  uint64_t cpus = affinity->Mask & allowed_cpus_;
  if (config().engine.idle == config::IdlePolicy::kBusyPoll) {
    for (const unsigned cpu : config().eal.lcores)
      if (cpu < 64) cpus &= ~(uint64_t{1} << cpu);
  }
  return cpus;
}

bool Stack::reserve_notifiable() noexcept {
  if (notifiables_.fetch_add(1, std::memory_order_relaxed) < kMaxNotifiables) return true;
  notifiables_.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

// ------------------------------------------------------------------------------------------------- Adapter

NTSTATUS AdapterImpl::open(const config::Config& config, NdkVersion version, AdapterImpl** adapter) {
  if (adapter == nullptr) return STATUS_INVALID_PARAMETER;
  // ndkpi.md §1: major must match; the requested minor is the lowest the caller accepts.
  if (version.Major != kNdkVersion.Major || version.Minor > kNdkVersion.Minor) return NDIS_STATUS_BAD_VERSION;
  std::unique_ptr<AdapterImpl> a(new AdapterImpl());
  if (const NTSTATUS status = Stack::attach(config, a->stack_); status != STATUS_SUCCESS) return status;
  *adapter = a.release();
  return STATUS_SUCCESS;
}

AdapterImpl::AdapterImpl() : Adapter(kNdkVersion, NdkObjectTypeAdapter), Lifetime(nullptr) {}
AdapterImpl::~AdapterImpl() = default;

void AdapterImpl::close() {
  // Our own reference; successors hold theirs until their closes complete (ndkpi.md §10.3: on return every
  // callback of every descendant has returned).
  release();
  while (!unreferenced_.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::microseconds(100));
  Stack::detach(stack_, asked_to_stop_polling_);
  delete this;
}

void AdapterImpl::UroceStopPolling() {
  const std::lock_guard lock(stack_->adapters_mutex_);
  if (asked_to_stop_polling_) return;
  asked_to_stop_polling_ = true;
  stack_->stop_polling_requested();
}

NTSTATUS AdapterImpl::NdkQueryAdapterInfo(NdkAdapterInfo* info, uint32_t* buffer_size) {
  if (buffer_size == nullptr) return STATUS_INVALID_PARAMETER;
  if (*buffer_size < sizeof(NdkAdapterInfo)) {
    *buffer_size = sizeof(NdkAdapterInfo);
    return STATUS_BUFFER_TOO_SMALL;
  }
  if (info == nullptr) return STATUS_INVALID_PARAMETER;
  *info = stack_->info();
  *buffer_size = sizeof(NdkAdapterInfo);
  return STATUS_SUCCESS;
}

UroceResourceCounts AdapterImpl::UroceQueryResources() {
  const auto live = [this](NdkObjectType type) { return live_.at(type).load(std::memory_order_relaxed); };
  UroceResourceCounts r;
  r.Cqs = live(NdkObjectTypeCq);
  r.Pds = live(NdkObjectTypePd);
  r.Mrs = live(NdkObjectTypeMr);
  r.Mws = live(NdkObjectTypeMw);
  r.Srqs = live(NdkObjectTypeSrq);
  r.Qps = live(NdkObjectTypeQp);
  r.Connectors = live(NdkObjectTypeConnector);
  r.Listeners = live(NdkObjectTypeListener);
  r.SharedEndpoints = live(NdkObjectTypeSharedEndpoint);
  const dataplane::RcTransport::Usage transport = stack_->transport().usage();
  r.TransportQps = transport.qps;
  r.MemorySlots = transport.memory_slots;
  const ConnectionManager::Usage cm = stack_->connections().usage();
  r.CmIds = cm.cm_ids;
  r.BoundEndpoints = cm.bound_endpoints;
  return r;
}

uint16_t AdapterImpl::UroceEngineCount() const { return static_cast<uint16_t>(stack_->dataplane().engine_count()); }

GroupAffinity AdapterImpl::UroceEngineAffinity(uint16_t engine) const {
  const auto& cpus = stack_->config().eal.lcores;
  if (engine >= cpus.size() || cpus[engine] >= 64) return GroupAffinity{};
  return GroupAffinity{uint64_t{1} << cpus[engine], 0};
}

NTSTATUS AdapterImpl::NdkCreateCq(uint32_t cq_depth, CqNotificationCallback notification, void* notification_context,
                                  const GroupAffinity* affinity, CreateCompletion completion, void* request_context,
                                  Cq** cq) {
  if (cq_depth == 0 || cq_depth > kMaxCqDepth) return STATUS_INVALID_PARAMETER;
  const dataplane::EngineId home = choose_engine(affinity);
  const uint64_t callback_cpus = stack_->callback_cpus(affinity);
  return create(*this, completion, request_context, cq, [=, this]() -> std::pair<NTSTATUS, Cq*> {
    if (!reserve_notifiable()) return {STATUS_INSUFFICIENT_RESOURCES, nullptr};
    auto* c = new CqImpl(*this, cq_depth, home, notification, notification_context);
    c->executor = notifier().executor_for(callback_cpus);  // before any notification can exist
    stack_->enlist(*c);
    return {STATUS_SUCCESS, c};
  });
}

NTSTATUS AdapterImpl::NdkCreatePd(CreateCompletion completion, void* request_context, Pd** pd) {
  return create(*this, completion, request_context, pd, [this]() -> std::pair<NTSTATUS, Pd*> {
    return {STATUS_SUCCESS, new PdImpl(*this)};
  });
}

NTSTATUS AdapterImpl::NdkCreateSharedEndpoint(const sockaddr* address, uint32_t address_length,
                                              CreateCompletion completion, void* request_context,
                                              SharedEndpoint** endpoint) {
  std::optional<SocketEndpoint> local = endpoint_of(address, address_length);
  if (!local || is_any_address(local->ip)) return STATUS_INVALID_PARAMETER;
  if (!port_for(config(), local->ip, local->ip.is_v6)) return STATUS_INVALID_ADDRESS;
  return create(*this, completion, request_context, endpoint, [this, local]() -> std::pair<NTSTATUS, SharedEndpoint*> {
    SocketEndpoint bound = *local;  // port 0: bind() picks one
    auto* e = new SharedEndpointImpl(*this);
    const NTSTATUS status = connections().bind(bound, e);
    if (status != STATUS_SUCCESS) {
      (void)e->NdkCloseSharedEndpoint(nullptr, nullptr);
      return {status, nullptr};
    }
    e->set_endpoint(bound);
    return {STATUS_SUCCESS, e};
  });
}

NTSTATUS AdapterImpl::NdkCreateConnector(CreateCompletion completion, void* request_context, Connector** connector) {
  return create(*this, completion, request_context, connector, [this]() -> std::pair<NTSTATUS, Connector*> {
    return {STATUS_SUCCESS, new ConnectorImpl(*this)};
  });
}

// ndkpi.md §9.1 with [address, address + length) for the MDL. Logical addresses are virtual addresses here.
NTSTATUS AdapterImpl::NdkBuildLam(const void* address, std::size_t length, RequestCompletion, void*,
                                  NdkLogicalAddressMapping* lam, uint32_t* lam_size, uint32_t* fbo) {
  const auto first = reinterpret_cast<uint64_t>(address);
  if (address == nullptr || length == 0 || first + length < first || lam_size == nullptr || fbo == nullptr)
    return STATUS_INVALID_PARAMETER;
  // Pages from the one holding the first byte to the one holding the last: first % kPageSize + length - 1 cannot
  // wrap (the range does not), where rounding up by adding kPageSize - 1 could, for a length near 2^64.
  const uint64_t pages = (first % kPageSize + (length - 1)) / kPageSize + 1;
  if (pages > UINT32_MAX || ndk_lam_size(static_cast<uint32_t>(pages)) > UINT32_MAX) return STATUS_INVALID_PARAMETER;
  const auto needed = static_cast<uint32_t>(ndk_lam_size(static_cast<uint32_t>(pages)));
  if (lam == nullptr || *lam_size < needed) {
    *lam_size = needed;
    return STATUS_BUFFER_TOO_SMALL;
  }
  // ndkpi.md §9.6: mapping pins the pages, which fails for pages that are not there (cpu_access.h). Whether they
  // may be written is known only when NdkFastRegister gives the access, and it checks again then.
  if (const NTSTATUS s = status_of(check_cpu_access(first, length, CpuAccess::kRead)); s != STATUS_SUCCESS) return s;
  // SGEs with a privileged token may name these pages until NdkReleaseLam (lam_registry.h); receives and READ sinks
  // only if they may be written.
  const bool writable = check_cpu_access(first, length, CpuAccess::kReadWrite) == CpuAccessCheck::kAccessible;
  const uint64_t first_page = first - first % kPageSize;
  lams_.add(first_page, first_page + pages * kPageSize, writable);  // accessible user memory: no wrap
  lam->AdapterContext = nullptr;
  lam->AdapterPageCount = static_cast<uint32_t>(pages);
  // The array runs past its declared bound into the consumer's buffer, as NDK's does.
  NdkLogicalAddress* page = lam->AdapterPageArray;
  for (uint64_t i = 0; i < pages; ++i) page[i] = first - first % kPageSize + i * kPageSize;
  *lam_size = needed;
  *fbo = static_cast<uint32_t>(first % kPageSize);
  return STATUS_SUCCESS;
}

// The LAM's own pages name the range it mapped (a consumer's LAM that does not match one is ignored).
void AdapterImpl::NdkReleaseLam(NdkLogicalAddressMapping* lam) {
  if (lam == nullptr || lam->AdapterPageCount == 0) return;
  const uint64_t first_page = lam->AdapterPageArray[0];
  const uint64_t length = uint64_t{lam->AdapterPageCount} * kPageSize;
  if (first_page + length < first_page) return;
  (void)lams_.remove(first_page, first_page + length);
}

NTSTATUS AdapterImpl::NdkCreateListener(ConnectEventCallback connect_event, void* connect_event_context,
                                        CreateCompletion completion, void* request_context, Listener** listener) {
  if (connect_event == nullptr) return STATUS_INVALID_PARAMETER;
  return create(*this, completion, request_context, listener, [=, this]() -> std::pair<NTSTATUS, Listener*> {
    return {STATUS_SUCCESS, new ListenerImpl(*this, connect_event, connect_event_context)};
  });
}

}  // namespace detail
}  // namespace uroce::ndk
