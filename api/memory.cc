// Protection domains, memory regions (registered and fast-register) and memory windows.
#include "api/cpu_access.h"
#include "api/provider.h"

namespace uroce::ndk::detail {

namespace {

// NDK_MR_FLAG_* -> verbs access bits (ndkpi.md §11: REMOTE_WRITE 0x5 includes LOCAL_WRITE; RDMA_READ_SINK is
// an iWARP notion, accepted and ignored because we advertise RDMA_READ_SINK_NOT_REQUIRED).
constexpr uint32_t kKnownMrFlags = NDK_MR_FLAG_ALLOW_LOCAL_WRITE | NDK_MR_FLAG_ALLOW_REMOTE_READ |
                                   NDK_MR_FLAG_ALLOW_REMOTE_WRITE | NDK_MR_FLAG_RDMA_READ_SINK;
constexpr uint32_t kRemoteWriteOnlyBit = NDK_MR_FLAG_ALLOW_REMOTE_WRITE & ~NDK_MR_FLAG_ALLOW_LOCAL_WRITE;

uint32_t access_of_mr_flags(uint32_t flags) noexcept {
  uint32_t access = 0;
  if (flags & NDK_MR_FLAG_ALLOW_LOCAL_WRITE) access |= proto::kAccessLocalWrite;
  if (flags & NDK_MR_FLAG_ALLOW_REMOTE_READ) access |= proto::kAccessRemoteRead;
  if (flags & kRemoteWriteOnlyBit) access |= proto::kAccessRemoteWrite;
  return access;
}

// The same slot with the next key byte (rocev2.md §5: a stale token never matches).
constexpr uint32_t next_key(uint32_t token) noexcept { return (token & ~0xFFu) | ((token + 1) & 0xFFu); }

}  // namespace

// ------------------------------------------------------------------------------------------------------ PD

PdImpl::~PdImpl() {
  if (const uint32_t t = privileged_token_.load(std::memory_order_acquire); t != 0)
    (void)adapter_.transport().deregister_memory(t);  // never zero-copy (MemoryTable::pin_for_tx): nothing in flight
}

// ndkpi.md §9.3: local read and write of any address, never remote. One memory-table slot per PD, taken at the
// first call; a call that lost a race gives its own back (as NdkInitializeFastRegisterMr).
void PdImpl::NdkGetPrivilegedMemoryRegionToken(uint32_t* token) {
  if (token == nullptr) return;
  uint32_t current = privileged_token_.load(std::memory_order_acquire);
  if (current == 0) {
    // Every address but the first page, which Linux never maps (vm.mmap_min_addr): a null SGE stays an error.
    auto made = adapter_.transport().register_memory(kPageSize, UINT64_MAX - kPageSize, proto::kAccessLocalWrite, id_,
                                                     dataplane::MemoryKind::kPrivileged);
    if (made.ok()) {
      // A lost race leaves `current` holding the winner's token.
      if (privileged_token_.compare_exchange_strong(current, made.value(), std::memory_order_acq_rel)) {
        current = made.value();
      } else {
        (void)adapter_.transport().deregister_memory(made.value());
      }
    }
  }
  *token = current;
}

NTSTATUS PdImpl::check_privileged_sges(const NdkSge* sgl, uint32_t count, bool engines_write) const {
  const uint32_t privileged = privileged_token_.load(std::memory_order_acquire);
  if (privileged == 0) return STATUS_SUCCESS;  // never asked for: no SGE can carry it
  for (uint32_t i = 0; i < count; ++i) {
    const NdkSge& s = sgl[i];
    if (s.MemoryRegionToken != privileged || s.Length == 0) continue;
    if (!adapter_.lams().covers(sge_address(s), s.Length, engines_write)) return STATUS_ACCESS_VIOLATION;
  }
  return STATUS_SUCCESS;
}

NTSTATUS PdImpl::NdkCreateMr(bool fast_register, CreateCompletion completion, void* request_context, Mr** mr) {
  return adapter_.create(*this, completion, request_context, mr, [this, fast_register]() -> std::pair<NTSTATUS, Mr*> {
    return {STATUS_SUCCESS, new MrImpl(*this, fast_register)};
  });
}

NTSTATUS PdImpl::NdkCreateMw(CreateCompletion completion, void* request_context, Mw** mw) {
  return adapter_.create(*this, completion, request_context, mw, [this]() -> std::pair<NTSTATUS, Mw*> {
    auto token = adapter_.transport().reserve_memory(dataplane::MemoryKind::kWindow, id_);
    if (!token.ok()) return {STATUS_INSUFFICIENT_RESOURCES, nullptr};
    return {STATUS_SUCCESS, new MwImpl(*this, token.value())};
  });
}

// ------------------------------------------------------------------------------------------------------ MR

// Closing an MR deregisters it (a fast-register MR's registration ends as an invalidation would end it), and the
// memory is the consumer's again once the close completes: wait for zero-copy TX mbufs still reading it
// (NdkDeregisterMr completes asynchronously instead).
MrImpl::~MrImpl() {
  const uint32_t t = fast_register_ || registered() ? token() : 0;
  release_slot();
  if (t != 0) pd_.adapter().transport().wait_memory_drained(t);
}

void MrImpl::release_slot() noexcept {
  const uint32_t t = token();
  if (t == 0) return;
  if (fast_register_) {
    pd_.adapter().transport().release_memory_slot(t);  // its key byte may have moved on
  } else if (registered()) {
    // It ends the windows bound onto the MR too (ndkpi.md §9.6: a window lies inside its MR). rxe refuses to
    // deregister an MR with windows bound; NDK names no status for that, so they end with it.
    (void)pd_.adapter().transport().deregister_memory(t);
  }
  token_.store(0, std::memory_order_relaxed);
  registered_.store(false, std::memory_order_release);
  registering_.store(false, std::memory_order_release);  // it may be registered again
  page_capacity_.store(0, std::memory_order_release);
}

// The arguments are checked inline. The pages are checked (faulted in) inline too, except for a registration of
// more than kInlineRegistrationLimit bytes with a completion routine: faulting in tens of MiB takes milliseconds
// (32 MiB: ~2.5 ms here), which a poller that registers as peers connect (an NVMe-oF target's queue buffers)
// must not spend. That one completes from the notifier's arena (STATUS_PENDING, ndkpi.md §8, §9.4: the memory is
// untouchable while it is pending). Without a completion it always finishes here.
NTSTATUS MrImpl::NdkRegisterMr(void* address, std::size_t length, uint32_t flags, RequestCompletion completion,
                               void* request_context) {
  if (fast_register_ || registered()) return STATUS_INVALID_DEVICE_REQUEST;
  if (address == nullptr || length == 0 || length > kMaxRegistrationSize || (flags & ~kKnownMrFlags) != 0)
    return STATUS_INVALID_PARAMETER;
  if (reinterpret_cast<uintptr_t>(address) + length < reinterpret_cast<uintptr_t>(address))
    return STATUS_INVALID_PARAMETER;  // wraps around the address space
  if ((flags & kRemoteWriteOnlyBit) && !(flags & NDK_MR_FLAG_ALLOW_LOCAL_WRITE)) return STATUS_INVALID_PARAMETER;
  // One registration at a time: a second call while one is pending (or done) is refused, as on a registered MR.
  if (registering_.exchange(true, std::memory_order_acq_rel)) return STATUS_INVALID_DEVICE_REQUEST;
  if (completion == nullptr || length <= kInlineRegistrationLimit) return register_pages(address, length, flags);
  retain();  // the MR's close waits for the registration (ndkpi.md §10.3)
  try {
    pd_.adapter().notifier().run([this, address, length, flags, completion, request_context] {
      completion(request_context, register_pages(address, length, flags));
      release();
    });
  } catch (...) {  // no memory for the task: register here after all
    release();
    return register_pages(address, length, flags);
  }
  return STATUS_PENDING;
}

NTSTATUS MrImpl::register_pages(void* address, std::size_t length, uint32_t flags) {
  const uint32_t access = access_of_mr_flags(flags);
  // ndkpi.md §9.4: the memory is pinned at registration, which fails for pages that are not there, and for read-only
  // pages when the MR allows writes (cpu_access.h: otherwise an engine faults when a peer's WRITE or READ arrives).
  const auto begin = reinterpret_cast<uint64_t>(address);
  NTSTATUS s = status_of(check_cpu_access(begin, length, cpu_access_of(access)));
  if (s == STATUS_SUCCESS) {
    auto token = pd_.adapter().transport().register_memory(begin, length, access, pd_.id());
    if (token.ok()) {
      address_ = begin;
      length_ = length;
      access_ = access;
      token_.store(token.value(), std::memory_order_relaxed);
      registered_.store(true, std::memory_order_release);
      return STATUS_SUCCESS;
    }
    s = STATUS_INSUFFICIENT_RESOURCES;
  }
  registering_.store(false, std::memory_order_release);  // the MR stays unregistered: it may be tried again
  return s;
}

// Zero-copy TX mbufs may still point into the memory (dataplane/rc_transport.h): the deregistration then
// completes later, from the notifier, once they are freed (STATUS_PENDING, ndkpi.md §8). Without a completion
// routine it waits here.
NTSTATUS MrImpl::NdkDeregisterMr(RequestCompletion completion, void* request_context) {
  if (fast_register_ || !registered()) return STATUS_INVALID_DEVICE_REQUEST;
  const uint32_t t = token();
  release_slot();
  dataplane::RcTransport& transport = pd_.adapter().transport();
  if (!transport.memory_in_flight(t)) return STATUS_SUCCESS;
  if (completion == nullptr) {
    transport.wait_memory_drained(t);
    return STATUS_SUCCESS;
  }
  pd_.adapter().notifier().run([&transport, t, completion, request_context] {
    transport.wait_memory_drained(t);
    completion(request_context, STATUS_SUCCESS);
  });
  return STATUS_PENDING;
}

NTSTATUS MrImpl::NdkInitializeFastRegisterMr(uint32_t adapter_page_count, bool remote_access, RequestCompletion,
                                             void*) {
  if (!fast_register_) return STATUS_INVALID_DEVICE_REQUEST;
  if (adapter_page_count == 0) return STATUS_INVALID_PARAMETER;
  if (adapter_page_count > kFastRegisterPageCount) return STATUS_IMPLEMENTATION_LIMIT;
  // May be repeated, serially or in parallel (ndkpi.md §9.4): the first call to install its slot keeps it; a call
  // that lost the race gives its own back. The capacity and rights are the newest call's.
  if (token() == 0) {
    auto token = pd_.adapter().transport().reserve_memory(dataplane::MemoryKind::kFastRegisterRegion, pd_.id());
    if (!token.ok()) return STATUS_INSUFFICIENT_RESOURCES;
    uint32_t expected = 0;
    if (!token_.compare_exchange_strong(expected, token.value(), std::memory_order_acq_rel))
      pd_.adapter().transport().release_memory_slot(token.value());
  }
  remote_access_.store(remote_access, std::memory_order_relaxed);
  page_capacity_.store(adapter_page_count, std::memory_order_release);
  return STATUS_SUCCESS;
}

uint32_t MrImpl::next_token() noexcept {
  const uint32_t t = next_key(token());
  token_.store(t, std::memory_order_relaxed);
  return t;
}

// ------------------------------------------------------------------------------------------------------ MW

MwImpl::~MwImpl() {
  pd_.adapter().transport().release_memory_slot(token());
  if (MrImpl* mr = bound_.load(std::memory_order_acquire)) mr->release();
}

uint32_t MwImpl::bind_to(MrImpl& mr) noexcept {
  mr.retain();  // ndkpi.md §2: MR -> MW after NdkBind; the MR's close waits for the window's
  pd_.adapter().transport().note_window_bind(mr.token());  // before the post: a deregistration now ends the window
  if (MrImpl* previous = bound_.exchange(&mr, std::memory_order_acq_rel)) previous->release();
  const uint32_t t = next_key(token());
  token_.store(t, std::memory_order_relaxed);
  return t;
}

}  // namespace uroce::ndk::detail
