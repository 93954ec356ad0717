// uroce's public API: Microsoft's NDKPI (Network Direct Kernel Provider Interface) in the shape of C++
// (../shared/ref/ndkpi.md). Same objects, functions, flags, statuses and rules; namespace uroce::ndk.
//
//   Adapter -> Cq, Pd;  Pd -> Mr, Mw, Srq, Qp;  Cq -> Qp;  Srq -> Qp;  Mr -> Mw (after NdkBind)
//
// Each NDK dispatch table is an abstract class: its entries are the virtual NdkXxx member functions, in
// the NDK's order. Objects are created by their parent's NdkCreateXxx and end with their own NdkCloseXxx;
// the consumer never deletes them. Every object starts with an ObjectHeader (NDK_OBJECT_HEADER).
//
// What uroce decides where NDK leaves the provider a choice:
//   * Creates (NdkCreateCq/Pd/Mr/Mw/Srq/Qp/QpWithSrq) and UroceConnect: with a completion callback they
//     return STATUS_PENDING and deliver the object (or the failure) through it later, on a notifier thread;
//     with a null callback they finish before returning. Parameter errors are always returned inline.
//   * Every other request (register, deregister, initialize fast register, resize, modify SRQ) finishes
//     inline: it never returns STATUS_PENDING, so its completion callback is never called.
//   * Closes return STATUS_SUCCESS, or STATUS_PENDING while successors are open or a notification is being
//     delivered (ndkpi.md §10.3); then the close completion runs when the last of them goes. NdkCloseQp with a
//     completion always returns STATUS_PENDING: the QP leaves its engine's tables on the engine, which a control
//     thread waits for, not the caller. A close with a null completion waits instead (never call it from a
//     callback it would wait for).
//   * Posting and polling take no locks and never block or allocate. Initiator posts on a QP that is not
//     connected fail with STATUS_CONNECTION_INVALID; receives may be posted before connecting.
//   * Notifications (CQ, SRQ) and async completions run on a TBB task arena, never on an engine thread,
//     serialised per CQ/SRQ.
//   * Connection management: connectors and listeners speak the IB CM on each port's GSI QP with the RDMA CM
//     conventions, so Linux rdma_cm (rping, perftest -R, nvme-rdma) is the peer in either role. Connect,
//     Accept, CompleteConnect and Disconnect return STATUS_PENDING and complete on the notifier; Listen and
//     Reject finish inline. Private data: 56 bytes in a connect, 196 in an accept, 148 in a reject.
//     UroceConnect still connects a QP from attributes exchanged out of band, as perftest and ibv_rc_pingpong
//     do by default (see UroceConnectAttributes).
//   * Addresses: a "logical address" (NDK_LOGICAL_ADDRESS) is a virtual address of this process. Fast register
//     takes any list of page-aligned pages and any BaseVirtualAddress = FBO + n x PAGE_SIZE (ndkpi.md §9.6): the
//     region's addresses are then its own, translated page by page (pages that follow each other with
//     BaseVirtualAddress = page 0 + FBO are used as they are). UD QPs take only memory at its own address.
//     At most four FastRegisters of one MR with such a page list may wait in send queues at once; a fifth is
//     STATUS_INSUFFICIENT_RESOURCES.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <netinet/in.h>
#include <sys/socket.h>

#include "api/ndk_types.h"
#include "config/config.h"

namespace uroce::ndk {

class Adapter;
class Cq;
class Pd;
class Mr;
class Mw;
class Srq;
class Qp;
class Connector;
class Listener;
class SharedEndpoint;

// NDK_FN_CONNECT_EVENT_CALLBACK: one new connector per incoming connection request; the consumer accepts,
// rejects or closes it. NDK_FN_DISCONNECT_EVENT_CALLBACK: the peer disconnected (at most once per connection).
using ConnectEventCallback = void (*)(void* context, Connector* connector);
using DisconnectEventCallback = void (*)(void* context);

// NDK_OBJECT_HEADER: the negotiated version and the object's type, at the start of every object.
class ObjectHeader {
 public:
  NdkVersion Version{};
  NdkObjectType ObjectType = NdkObjectTypeUndefined;

  // In every dispatch table (ndkpi.md §4). No extension interface is defined, so this is STATUS_NOT_SUPPORTED
  // (STATUS_INVALID_PARAMETER without an ID or a place for the interface).
  virtual NTSTATUS NdkQueryExtension(const NdkGuid* extension_interface_id, NdkVersion extension_interface_version,
                                     NdkExtensionInterface* extension_interface) {
    (void)extension_interface_version;
    if (extension_interface_id == nullptr || extension_interface == nullptr) return STATUS_INVALID_PARAMETER;
    extension_interface->Dispatch = nullptr;
    return STATUS_NOT_SUPPORTED;
  }

 protected:
  ObjectHeader(NdkVersion version, NdkObjectType type) : Version(version), ObjectType(type) {}
  ~ObjectHeader() = default;
};

// What an adapter holds at one moment, each number read from the bookkeeping that owns it (a uroce extension:
// tools and tests compare two of them to prove that nothing was left behind).
struct UroceResourceCounts {
  // NDK objects that exist: created, and not yet destroyed by their close (a pending close still counts).
  uint32_t Cqs = 0;
  uint32_t Pds = 0;
  uint32_t Mrs = 0;
  uint32_t Mws = 0;
  uint32_t Srqs = 0;
  uint32_t Qps = 0;
  uint32_t Connectors = 0;
  uint32_t Listeners = 0;
  uint32_t SharedEndpoints = 0;
  // The RC transport: QPs registered with the engines, and memory-table slots in use (registered regions,
  // fast-register regions and windows).
  uint32_t TransportQps = 0;
  uint32_t MemorySlots = 0;
  // Connection management: the CM's connections (its CM IDs, those in time-wait included: 1 s after a
  // disconnect or abort), and the local endpoints bound by listeners, shared endpoints and connectors.
  uint32_t CmIds = 0;
  uint32_t BoundEndpoints = 0;

  friend bool operator==(const UroceResourceCounts&, const UroceResourceCounts&) = default;
};

// NDK_ADAPTER_DISPATCH. Opened with NdkOpenAdapter, closed with NdkCloseAdapter (blocking).
class Adapter : public ObjectHeader {
 public:
  virtual NTSTATUS NdkQueryAdapterInfo(NdkAdapterInfo* info, uint32_t* buffer_size) = 0;
  // NdkBuildLAM with [address, address + length) for the MDL: fills `lam` (of *lam_size bytes) with the buffer's
  // pages as logical addresses (ndk_lam_size(pages) bytes; STATUS_BUFFER_TOO_SMALL puts that in *lam_size) and
  // *fbo with the first byte's offset in page 0. Finishes inline (the completion is never called). The pages are
  // not pinned: the engines reach memory through the CPU, so it only has to stay mapped. Use the pages in
  // NdkFastRegister, or in SGEs with the PD's privileged token.
  virtual NTSTATUS NdkBuildLam(const void* address, std::size_t length, RequestCompletion completion,
                               void* request_context, NdkLogicalAddressMapping* lam, uint32_t* lam_size,
                               uint32_t* fbo) = 0;
  // NdkReleaseLAM: after every request using the mapping has completed. Nothing to give back here.
  virtual void NdkReleaseLam(NdkLogicalAddressMapping* lam) = 0;
  // Affinity picks the engine whose CPU it names (UroceEngineAffinity); QPs whose initiator CQ this is run
  // on that engine. Without one, CQs go round-robin over the engines. Callbacks run on notifier threads pinned to
  // the affinity's CPUs (seed 003: the preferred processors for callbacks), less the cores of busy-polling engines
  // (a callback there would take turns with a spinning engine) and CPUs this process may not use; unpinned if
  // none is left, or without an affinity. The same holds for an SRQ's affinity.
  virtual NTSTATUS NdkCreateCq(uint32_t cq_depth, CqNotificationCallback notification, void* notification_context,
                               const GroupAffinity* affinity, CreateCompletion completion, void* request_context,
                               Cq** cq) = 0;
  virtual NTSTATUS NdkCreatePd(CreateCompletion completion, void* request_context, Pd** pd) = 0;
  // An explicit local endpoint (address and port; port 0: one from 49152-65535) for many outgoing connections.
  virtual NTSTATUS NdkCreateSharedEndpoint(const sockaddr* address, uint32_t address_length,
                                           CreateCompletion completion, void* request_context,
                                           SharedEndpoint** endpoint) = 0;
  virtual NTSTATUS NdkCreateConnector(CreateCompletion completion, void* request_context, Connector** connector) = 0;
  virtual NTSTATUS NdkCreateListener(ConnectEventCallback connect_event, void* connect_event_context,
                                     CreateCompletion completion, void* request_context, Listener** listener) = 0;

  // --- uroce extensions ---
  // The affinity that puts a CQ (and the QPs it serves) on engine `engine`.
  [[nodiscard]] virtual GroupAffinity UroceEngineAffinity(uint16_t engine) const = 0;
  [[nodiscard]] virtual uint16_t UroceEngineCount() const = 0;
  // Returns once every notification and async completion handed to the notifier before the call has been
  // delivered (for tests and orderly shutdown; never call it from a callback).
  virtual void UroceWaitForNotifier() = 0;
  // Stops the engines: from its return no packet is received or sent, though the ports stay open until
  // NdkCloseAdapter, the only call valid afterwards (close every object first). Two processes joined by a
  // shared-memory link (net_memif) both call it, meet out of band, and only then close their adapters: DPDK
  // 22.11's memif PMD crashes a process whose engine polls while the peer closes its end. Adapters of one process
  // share their engines (NdkOpenAdapter): they stop once every open adapter has called it.
  virtual void UroceStopPolling() = 0;
  // The adapter's resources now (see UroceResourceCounts). Waits for the CM thread to count its own; never call it
  // from a callback.
  [[nodiscard]] virtual UroceResourceCounts UroceQueryResources() = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Adapter() = default;
};

// NDIS's OPEN_NDK_ADAPTER_HANDLER: starts the dataplane and the RC transport for `config`. Version
// negotiation as NDKPI's: major 1, and the lowest minor the caller accepts; the adapter runs 1.2. Many adapters
// may be open at once (ndkpi.md §1): DPDK serves one dataplane per process, so adapters opened on the same
// configuration share its engines, RC transport, notifier and connection manager, which the first open starts and
// the last close stops. An open on another configuration while adapters run fails (STATUS_INSUFFICIENT_RESOURCES,
// saying why on stderr). Objects of one adapter must not be used with another's (a QP's CQs and PD are its
// adapter's), as NDKPI requires.
[[nodiscard]] NTSTATUS NdkOpenAdapter(const config::Config& config, NdkVersion version, Adapter** adapter);
// CLOSE_NDK_ADAPTER_HANDLER: blocks until every object of the adapter has been closed (consumers close
// them, in any order) and every callback has returned, then stops the engines. Never from a callback.
void NdkCloseAdapter(Adapter* adapter);

// NDK_CQ_DISPATCH. Consumers serialise NdkGetCqResults, NdkGetCqResultsEx and NdkArmCq on one CQ; NdkResizeCq may
// come from any thread, while they run.
class Cq : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseCq(CloseCompletion completion, void* request_context) = 0;
  // Grow or shrink without losing entries (shrinking below what is queued: STATUS_BUFFER_OVERFLOW), without
  // quiescing the consumer and without waiting for the engines: the new depth holds from their next loop iteration.
  virtual NTSTATUS NdkResizeCq(uint32_t cq_depth, RequestCompletion completion, void* request_context) = 0;
  // NDK_CQ_NOTIFY_ERRORS / ANY / SOLICITED, merged with an earlier unfired arm per ndkpi.md §10.2.
  virtual void NdkArmCq(uint32_t notify_type) = 0;
  // Dequeues up to `count` results. After a CQ overrun or a fatal error the entries queued before it stay
  // readable and nothing further is queued; the consumer hears of it through the notification status
  // (STATUS_BUFFER_OVERFLOW or STATUS_INTERNAL_ERROR, api/README.md), never as a result.
  virtual uint32_t NdkGetCqResults(NdkResult* results, uint32_t count) = 0;
  virtual NTSTATUS NdkControlCqInterruptModeration(uint32_t interval_us, uint32_t count) = 0;  // api/README.md
  virtual uint32_t NdkGetCqResultsEx(NdkResultEx* results, uint32_t count) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Cq() = default;
};

// NDK_PD_DISPATCH.
class Pd : public ObjectHeader {
 public:
  virtual NTSTATUS NdkClosePd(CloseCompletion completion, void* request_context) = 0;
  virtual NTSTATUS NdkCreateMr(bool fast_register, CreateCompletion completion, void* request_context, Mr** mr) = 0;
  virtual NTSTATUS NdkCreateMw(CreateCompletion completion, void* request_context, Mw** mw) = 0;
  // The SRQ's receives are consumed by one engine (the one its affinity names): QPs that use it run there.
  virtual NTSTATUS NdkCreateSrq(uint32_t srq_depth, uint32_t max_receive_request_sge, uint32_t notify_threshold,
                                SrqNotificationCallback notification, void* notification_context,
                                const GroupAffinity* affinity, CreateCompletion completion, void* request_context,
                                Srq** srq) = 0;
  virtual NTSTATUS NdkCreateQp(Cq* receive_cq, Cq* initiator_cq, void* qp_context, uint32_t receive_queue_depth,
                               uint32_t initiator_queue_depth, uint32_t max_receive_request_sge,
                               uint32_t max_initiator_request_sge, uint32_t inline_data_size,
                               CreateCompletion completion, void* request_context, Qp** qp) = 0;
  virtual NTSTATUS NdkCreateQpWithSrq(Cq* receive_cq, Cq* initiator_cq, Srq* srq, void* qp_context,
                                      uint32_t initiator_queue_depth, uint32_t max_initiator_request_sge,
                                      uint32_t inline_data_size, CreateCompletion completion, void* request_context,
                                      Qp** qp) = 0;
  // The PD's privileged token (ndkpi.md §9.3): SGEs carrying it give a LogicalAddress (NdkBuildLam) instead of an
  // address inside an MR, for local reads and writes of any memory of this process; it never grants remote access
  // (a peer naming it gets a remote access error). 0 if the memory table has no room left for it.
  virtual void NdkGetPrivilegedMemoryRegionToken(uint32_t* token) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Pd() = default;
};

// NDK_MR_DISPATCH. In userspace the MDL is simply [address, address + length).
class Mr : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseMr(CloseCompletion completion, void* request_context) = 0;
  virtual NTSTATUS NdkRegisterMr(void* address, std::size_t length, uint32_t flags, RequestCompletion completion,
                                 void* request_context) = 0;
  virtual NTSTATUS NdkDeregisterMr(RequestCompletion completion, void* request_context) = 0;
  virtual NTSTATUS NdkInitializeFastRegisterMr(uint32_t adapter_page_count, bool remote_access,
                                               RequestCompletion completion, void* request_context) = 0;
  // One token serves both (as rxe's lkey == rkey). After NdkFastRegister returns, re-read them.
  [[nodiscard]] virtual uint32_t NdkGetRemoteTokenFromMr() = 0;
  [[nodiscard]] virtual uint32_t NdkGetLocalTokenFromMr() = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Mr() = default;
};

// NDK_MW_DISPATCH (type-2 windows: the token is known when NdkBind returns).
class Mw : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseMw(CloseCompletion completion, void* request_context) = 0;
  [[nodiscard]] virtual uint32_t NdkGetRemoteTokenFromMw() = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Mw() = default;
};

// NDK_SRQ_DISPATCH.
class Srq : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseSrq(CloseCompletion completion, void* request_context) = 0;
  // depth 0 keeps the depth (which may grow up to the ring the SRQ was created with); a threshold > 0 arms
  // the one-shot "fewer than threshold receives posted" notification, at once if already below.
  virtual NTSTATUS NdkModifySrq(uint32_t srq_depth, uint32_t notify_threshold, RequestCompletion completion,
                                void* request_context) = 0;
  virtual NTSTATUS NdkSrqReceive(void* request_context, const NdkSge* sgl, uint32_t sge_count) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Srq() = default;
};

// What perftest / ibv_rc_pingpong exchange out of band, until connection management exists.
struct UroceConnectAttributes {
  const sockaddr* LocalAddress = nullptr;           // one of our ports' addresses; nullptr: the first of the family
  const sockaddr* RemoteAddress = nullptr;          // the peer's IPv4 or IPv6 address (port ignored)
  uint32_t RemoteQpNumber = 0;                      // UroceGetQpNumber() on the peer
  uint32_t RemotePsn = 0;                           // the peer's LocalPsn
  uint32_t LocalPsn = 0;                            // our first request PSN (24 bits)
  std::optional<std::array<uint8_t, 6>> RemoteMac;  // none: resolved with ARP / neighbour discovery
  uint32_t PathMtu = 0;                             // 256..4096; 0: the config's rdma.path_mtu
  uint32_t InboundReadLimit = 0;                    // our IRD (READs the peer may have outstanding); 0: adapter max
  uint32_t OutboundReadLimit = 0;                   // our ORD (<= the peer's IRD); 0: adapter max
  std::optional<uint8_t> AckTimeout;                // 4.096 us * 2^n; none: the config's
  std::optional<uint8_t> RetryCount;
  std::optional<uint8_t> RnrRetry;  // 7 = infinite
  std::optional<uint8_t> MinRnrTimer;
  uint8_t HopLimit = 64;     // IP TTL / IPv6 hop limit (what a kernel verbs peer puts on the wire, rocev2.md §1.2)
  uint8_t TrafficClass = 0;  // IPv4 TOS / IPv6 traffic class: DSCP << 2 | ECN
};

// NDK_QP_DISPATCH. One thread at a time posts to the initiator queue and one to the receive queue (they may
// differ); NdkFlush may run concurrently with both.
class Qp : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseQp(CloseCompletion completion, void* request_context) = 0;
  virtual void NdkFlush() = 0;
  virtual NTSTATUS NdkSend(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags) = 0;
  virtual NTSTATUS NdkReceive(void* request_context, const NdkSge* sgl, uint32_t sge_count) = 0;
  virtual NTSTATUS NdkBind(void* request_context, Mr* mr, Mw* mw, void* virtual_address, std::size_t length,
                           uint32_t flags) = 0;
  virtual NTSTATUS NdkFastRegister(void* request_context, Mr* mr, uint32_t adapter_page_count,
                                   const NdkLogicalAddress* adapter_page_array, uint32_t fbo, std::size_t length,
                                   void* base_virtual_address, uint32_t flags) = 0;
  virtual NTSTATUS NdkInvalidate(void* request_context, ObjectHeader* mr_or_mw, uint32_t flags) = 0;
  virtual NTSTATUS NdkRead(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint64_t remote_address,
                           uint32_t remote_token, uint32_t flags) = 0;
  virtual NTSTATUS NdkWrite(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint64_t remote_address,
                            uint32_t remote_token, uint32_t flags) = 0;
  virtual NTSTATUS NdkSendAndInvalidate(void* request_context, const NdkSge* sgl, uint32_t sge_count, uint32_t flags,
                                        uint32_t remote_token) = 0;

  // --- uroce extensions ---
  [[nodiscard]] virtual uint32_t UroceGetQpNumber() = 0;
  // Connects the QP (RESET -> RTS in one step). Errors: STATUS_INVALID_PARAMETER, STATUS_INVALID_ADDRESS (the
  // local address is on no port), STATUS_HOST_UNREACHABLE (no ARP/ND answer), STATUS_CONNECTION_INVALID
  // (already connected or flushed).
  virtual NTSTATUS UroceConnect(const UroceConnectAttributes& attributes, RequestCompletion completion,
                                void* request_context) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Qp() = default;
};

// NDK_SHARED_ENDPOINT_DISPATCH.
class SharedEndpoint : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseSharedEndpoint(CloseCompletion completion, void* request_context) = 0;
  virtual NTSTATUS NdkGetSharedEndpointLocalAddress(sockaddr* address, uint32_t* address_length) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~SharedEndpoint() = default;
};

// NDK_CONNECTOR_DISPATCH (ndkpi.md §9.7). Read limits are clamped to the adapter's and to what the peer offers;
// NdkGetConnectionData reports the peer's. Addresses are sockaddr_in or sockaddr_in6 with their length.
class Connector : public ObjectHeader {
 public:
  // Closing a connector that is still connected ends the connection abortively (a DREQ, the QP flushed); an
  // incoming connector closed without NdkAccept rejects the request. Pending requests complete CANCELLED.
  virtual NTSTATUS NdkCloseConnector(CloseCompletion completion, void* request_context) = 0;
  // Completes when the peer accepted (then NdkCompleteConnect), or with STATUS_CONNECTION_REFUSED (no listener,
  // or rejected: NdkGetConnectionData then returns the reject's private data), STATUS_IO_TIMEOUT,
  // STATUS_HOST_UNREACHABLE.
  virtual NTSTATUS NdkConnect(Qp* qp, const sockaddr* source, uint32_t source_length, const sockaddr* destination,
                              uint32_t destination_length, uint32_t inbound_read_limit, uint32_t outbound_read_limit,
                              const void* private_data, uint32_t private_data_length, RequestCompletion completion,
                              void* request_context) = 0;
  virtual NTSTATUS NdkConnectWithSharedEndpoint(Qp* qp, SharedEndpoint* endpoint, const sockaddr* destination,
                                                uint32_t destination_length, uint32_t inbound_read_limit,
                                                uint32_t outbound_read_limit, const void* private_data,
                                                uint32_t private_data_length, RequestCompletion completion,
                                                void* request_context) = 0;
  virtual NTSTATUS NdkCompleteConnect(DisconnectEventCallback disconnect_event, void* disconnect_event_context,
                                      RequestCompletion completion, void* request_context) = 0;
  // Completes once the peer confirmed (RTU, or its first packet on the QP).
  virtual NTSTATUS NdkAccept(Qp* qp, uint32_t inbound_read_limit, uint32_t outbound_read_limit,
                             const void* private_data, uint32_t private_data_length,
                             DisconnectEventCallback disconnect_event, void* disconnect_event_context,
                             RequestCompletion completion, void* request_context) = 0;
  virtual NTSTATUS NdkReject(const void* private_data, uint32_t private_data_length) = 0;
  virtual NTSTATUS NdkGetConnectionData(uint32_t* inbound_read_limit, uint32_t* outbound_read_limit, void* private_data,
                                        uint32_t* private_data_length) = 0;
  virtual NTSTATUS NdkGetLocalAddress(sockaddr* address, uint32_t* address_length) = 0;
  virtual NTSTATUS NdkGetPeerAddress(sockaddr* address, uint32_t* address_length) = 0;
  // Graceful: completes when the peer answered (or timed out: STATUS_IO_TIMEOUT), with the QP flushed.
  virtual NTSTATUS NdkDisconnect(RequestCompletion completion, void* request_context) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Connector() = default;
};

// NDK_LISTENER_DISPATCH (ndkpi.md §9.8).
class Listener : public ObjectHeader {
 public:
  virtual NTSTATUS NdkCloseListener(CloseCompletion completion, void* request_context) = 0;
  // Address 0.0.0.0 / :: listens on every address of that version; port 0 picks one (read it back).
  virtual NTSTATUS NdkListen(const sockaddr* address, uint32_t address_length, RequestCompletion completion,
                             void* request_context) = 0;
  virtual NTSTATUS NdkGetListenerLocalAddress(sockaddr* address, uint32_t* address_length) = 0;
  // Paused: requests are rejected as if nobody listened.
  virtual void NdkControlConnectEvents(bool pause) = 0;

 protected:
  using ObjectHeader::ObjectHeader;
  ~Listener() = default;
};

}  // namespace uroce::ndk
