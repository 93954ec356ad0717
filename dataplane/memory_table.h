// Registered memory: ONE table shared by every engine and the control path.
//
// A token is index << 8 | key byte, as rxe forms them (rocev2.md §5): the index picks the slot in O(1), and
// the key byte changes on every re-registration, fast register and bind, so a stale token never matches.
//
// Who writes a slot: control threads (register, deregister, reserve and release a slot for a fast-register MR
// or a memory window) and engines (fast register, local invalidate and bind executed from a send queue, and
// Send with Invalidate from a peer). Engines read every slot on the datapath (resolve).
//
// Memory ordering: each slot is a seqlock without fences (so ThreadSanitizer can check it). A writer claims
// the slot by moving its sequence from even to odd with a CAS (begin_slot_write), stores the fields with
// release (so none becomes visible before the odd sequence), and publishes them by storing the next even
// value with release (end_slot_write). A reader loads the sequence with acquire, loads the fields with
// acquire (so the second sequence load cannot move above them, and a reader that sees any new field also
// sees the odd sequence), and re-reads the sequence (read_slot): if it was odd or has moved, the copy may be
// torn and the reader treats the slot as invalid instead of retrying. On x86 all of these are plain moves. That is
// linearisable because every write either makes a slot invalid or gives it a token nobody can hold yet: a write in
// progress counts as already done. So readers never wait, and an engine never spins on a control thread that was
// preempted mid-write.
//
// Writers of one slot exclude each other through the CAS. A control thread that loses it retries (it may
// wait: it is off the datapath, and the winner is either an engine, which is never preempted, or another
// control thread). An engine that loses it fails the operation (two QPs racing to change the same key; the
// loser completes in error), so engines never spin either. The fields are atomics so that a torn read is a
// benign stale value, not a data race.
//
// Paged regions. A fast register may name pages that do not follow each other, and a BaseVirtualAddress that is
// not where its first byte is (NdkFastRegister, ndkpi.md §9.6: any page array, BaseVirtualAddress = FBO + n x
// PAGE_SIZE). Such a region's [addr, addr + length) is the consumer's address space for it, and byte addr + i lives
// at pages[(first_offset + i) / kRegionPageSize] + (first_offset + i) % kRegionPageSize. resolve() gives a pointer
// only for a range whose pages are adjacent in memory; copy() moves any granted range page by page. A slot
// reserved for a fast-register MR gets its page map once (control path) and keeps it until the table dies, so an
// engine holding a page pointer of an older registration always reads allocated memory. The page entries are
// atomics (relaxed): an engine rewrites them under the slot's claim while another may still translate through
// the registration it resolved before; what it then reads is a page of the consumer's, never a torn pointer.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "dataplane/qpn.h"
#include "proto/rc_types.h"

namespace uroce::dataplane {

enum class MemoryKind : uint8_t {
  kFree = 0,
  kRegion,              // NdkRegisterMr / ibv_reg_mr: valid from registration to deregistration
  kFastRegisterRegion,  // valid between a fast register and an invalidation (local or remote)
  kWindow,              // type-2 memory window: valid between a bind and an invalidation
  kPrivileged,          // a PD's privileged token (NDK): any address of the process, local access only
};

inline constexpr uint32_t kRegionPageSize = 4096;  // NDK's PAGE_SIZE on x86-64
inline constexpr uint32_t kMaxRegionPages = 256;   // pages one fast register may name
inline constexpr uint8_t kStagedPageLists = 4;     // page lists of one MR that may wait in send queues at once

struct MemoryRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  const std::atomic<uint64_t>* pages = nullptr;  // non-null: a paged region (see above)
  uint64_t first_offset = 0;                     // paged: where byte `addr` is, counted from pages[0]'s start
  uint32_t access = 0;                           // proto::Access bits
  uint32_t pd = 0;                               // protection domain id; requests must come from a QP of the same PD
  uint32_t token = 0;                            // both the local and the remote token
  MemoryKind kind = MemoryKind::kRegion;
  bool valid = true;
  uint32_t qpn = 0;     // a bound window (type 2): the QP it was bound through, the only one it serves
  uint32_t parent = 0;  // a bound window: the token of the region it lies in (invalidate_windows_of)

  // Fast-register MRs and type-2 windows may be invalidated by a peer's Send with Invalidate (rocev2.md §5).
  [[nodiscard]] bool remotely_invalidatable() const noexcept {
    return kind == MemoryKind::kFastRegisterRegion || kind == MemoryKind::kWindow;
  }
};

// Who asks a datapath question of the table: a QP, by its protection domain and its number. A region serves every
// QP of its PD; a type-2 memory window only the QP it was bound through (IBTA 10.6.7.2; rocev2.md §5).
struct Requester {
  uint32_t pd = 0;
  uint32_t qpn = 0;
};

class MemoryTable {
 public:
  explicit MemoryTable(uint32_t capacity)
      : slots_(std::make_unique<Slot[]>(capacity)),
        tx_pins_(std::make_unique<std::atomic<uint32_t>[]>(capacity)),
        engines_read_(std::make_unique<std::atomic<uint32_t>[]>(capacity)),
        windows_bound_(std::make_unique<std::atomic<bool>[]>(capacity)),
        page_maps_(std::make_unique<std::unique_ptr<PageMap>[]>(capacity)),
        capacity_(capacity) {}

  static constexpr uint32_t index_of(uint32_t token) noexcept { return token >> 8; }
  [[nodiscard]] uint32_t capacity() const noexcept { return capacity_; }

  // --- control path (may wait for a concurrent engine writer of the same slot) ---
  void insert(const MemoryRegion& r) noexcept {
    const uint32_t i = index_of(r.token);
    if (i >= capacity_) return;
    Slot& s = slots_[i];
    uint32_t before;
    while (!begin_slot_write(s, before)) {
    }
    store_fields(s, r);
    end_slot_write(s, before, true);
  }
  // Removes the slot's contents if `token` still names it (any kind, valid or not).
  void erase(uint32_t token) noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_) return;
    Slot& s = slots_[i];
    uint32_t before;
    while (!begin_slot_write(s, before)) {
    }
    const bool ours = s.token.load(std::memory_order_acquire) == token;
    if (ours) {
      s.kind.store(MemoryKind::kFree, std::memory_order_release);
      s.valid.store(false, std::memory_order_release);
    }
    end_slot_write(s, before, ours);
  }

  // Frees slot `index` whatever token it holds now (a fast-register MR or window whose key byte moved on).
  void erase_slot(uint32_t index) noexcept {
    if (index >= capacity_) return;
    Slot& s = slots_[index];
    uint32_t before;
    while (!begin_slot_write(s, before)) {
    }
    s.kind.store(MemoryKind::kFree, std::memory_order_release);
    s.valid.store(false, std::memory_order_release);
    end_slot_write(s, before, true);
  }

  // Gives the slot `token` names a page map, once (it allocates). Call before the slot serves a fast-register MR.
  void prepare_page_map(uint32_t token) {
    const uint32_t i = index_of(token);
    if (i < capacity_ && page_maps_[i] == nullptr) page_maps_[i] = std::make_unique<PageMap>();
  }

  // Poster (NdkFastRegister): copies a page list for a FastRegister WQE and returns its number for
  // fast_register() (1 to kStagedPageLists), or 0 if the slot has no page map or every list of it still waits for
  // its WQE. Acquire on the claim pairs with the engine's release in unstage_pages(): the engine has finished
  // reading a list before a poster writes it again.
  [[nodiscard]] uint8_t stage_pages(uint32_t token, const uint64_t* pages, uint32_t count,
                                    uint64_t first_offset) noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_ || page_maps_[i] == nullptr || count == 0 || count > kMaxRegionPages) return 0;
    for (uint8_t list = 0; list < kStagedPageLists; ++list) {
      StagedPages& staged = page_maps_[i]->staged[list];
      bool idle = false;
      if (!staged.pending.compare_exchange_strong(idle, true, std::memory_order_acquire, std::memory_order_relaxed))
        continue;
      std::memcpy(staged.pages.data(), pages, count * sizeof(uint64_t));
      staged.count = count;
      staged.first_offset = first_offset;
      return static_cast<uint8_t>(list + 1);
    }
    return 0;
  }
  // Engine: the FastRegister WQE that carried list `list` has retired (executed or flushed); the list is free.
  void unstage_pages(uint32_t token, uint8_t list) noexcept {
    const uint32_t i = index_of(token);
    if (list == 0 || list > kStagedPageLists || i >= capacity_ || page_maps_[i] == nullptr) return;
    page_maps_[i]->staged[list - 1].pending.store(false, std::memory_order_release);
  }

  // --- zero-copy TX pins ---
  // A zero-copy TX mbuf points into registered memory until whoever consumes it (the NIC's TX completion, or
  // the peer engine on a ring link) frees it, possibly long after the WQE completed. Each slot counts those
  // mbufs, and a deregistration (erase) does not hand the slot or the memory back while the count is non-zero.
  //
  // Ordering (Dekker's pattern, as failed_after_receive_post in rc_transport.h): the engine increments the count,
  // then reads the slot; the deregistering thread erases the slot, then reads the count. The seq_cst fences
  // between each side's write and its read forbid both reads missing the other's write: either the engine sees
  // the slot erased and backs off, or the deregistration sees the pin and waits for it.

  // Engine: pins the region `token` names for one zero-copy mbuf over [addr, addr + length) and returns the
  // count to release with unpin_tx(), or nullptr (the token no longer names a valid region covering it).
  [[nodiscard]] std::atomic<uint32_t>* pin_for_tx(uint32_t token, uint64_t addr, uint32_t length) noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_) return nullptr;
    std::atomic<uint32_t>& pins = tx_pins_[i];
    pins.fetch_add(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the pin before the slot read (see above)
    MemoryRegion r;
    uint32_t sequence;
    // Registered regions only: a fast-register region's or a window's invalidation completes without waiting for
    // pins (only deregistration does), so their memory is always copied.
    if (read_index(i, r, sequence) && r.kind == MemoryKind::kRegion &&
        grant(r, token, addr, length, 0, {r.pd, r.qpn}, false) != nullptr)
      return &pins;
    unpin_tx(&pins);
    return nullptr;
  }
  // Any thread (an mbuf's free callback): the mbuf no longer points into the region. Release: the consumer's
  // reads of the payload happen before a deregistration that sees the count drop returns the memory.
  static void unpin_tx(std::atomic<uint32_t>* pins) noexcept { pins->fetch_sub(1, std::memory_order_release); }
  // Control path, after erase(): zero-copy mbufs still pointing into the slot `token` named. Acquire pairs with
  // unpin_tx(); the fence orders the erase before this read (see above).
  [[nodiscard]] uint32_t tx_pins(uint32_t token) const noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_) return 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return tx_pins_[i].load(std::memory_order_acquire);
  }

  // Control path, after erase(): whether an engine may still hold a pointer into the slot `token` named, resolved
  // before the erase (so a deregistration must wait for the engines to finish their loop iteration). False only for
  // a slot no engine has ever read. The fence orders the erase before this load, against note_engine_read()'s
  // store-then-fence-then-read: of an engine reading the slot and a deregistration erasing it, at least one sees
  // the other (the engine a freed slot, or the deregistration the flag).
  // Before a bind onto the region `region_token` is posted (and again where an engine binds): a window may lie in
  // the region from now on, so its deregistration (windows_may_exist) and a fast register's invalidation end the
  // windows bound onto it. Sticky. The fence orders the store before the post, against the erase-then-check of
  // windows_may_exist().
  void note_window_bind(uint32_t region_token) noexcept {
    const uint32_t i = index_of(region_token);
    if (i >= capacity_) return;
    windows_bound_[i].store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  // Control path, after erase(): whether a window may have been bound onto the slot `token` named.
  [[nodiscard]] bool windows_may_exist(uint32_t token) const noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_) return false;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return windows_bound_[i].load(std::memory_order_relaxed);
  }
  [[nodiscard]] bool engine_may_hold(uint32_t token) const noexcept { return engines_that_may_hold(token) != 0; }
  // An engine, after it invalidated `token` (or the control path after erase()): the engines that may still hold a
  // pointer into its memory, resolved before, as a bit per EngineId (EngineContext::wait_for_engines). Every
  // engine when a window was ever bound onto the slot: a window's readers are noted on the window's own slot.
  [[nodiscard]] uint32_t engines_that_may_hold(uint32_t token) const noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_) return 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (windows_bound_[i].load(std::memory_order_relaxed)) return ~0U;
    return engines_read_[i].load(std::memory_order_relaxed);
  }

  // --- datapath readers (engines) ---
  // The memory [addr, addr + length) if `token` names a valid region of PD `pd` that grants all of `access`
  // over it; otherwise nullptr. `local`: the token comes from a local SGE, which a memory window never
  // serves (windows grant remote access only). Zero-length accesses are never checked (IBTA C9-88), so
  // callers skip them.
  [[nodiscard]] uint8_t* resolve(uint32_t token, uint64_t addr, uint32_t length, uint32_t access, Requester who,
                                 bool local = false) const noexcept {
    note_engine_read(index_of(token), who);
    MemoryRegion r;
    uint32_t sequence;
    if (!read_index(index_of(token), r, sequence)) return nullptr;
    return grant(r, token, addr, length, access, who, local);
  }

  // What one engine-side reader (a QP's requester or responder) remembers of the slot it resolved last: a
  // consistent copy and the slot's sequence number when it was taken. Engine only, never shared.
  struct ResolveCache {
    uint32_t index = 0;
    uint32_t sequence = 1;  // odd: nothing cached
    MemoryRegion region;
  };
  // resolve(), answered from `cache` while the slot's sequence has not moved. Every write makes the sequence
  // odd while it runs and then moves it on (or puts it back having changed nothing), so an unchanged even
  // sequence means the cached copy is still the slot's contents: the common case is one load and compares.
  [[nodiscard]] uint8_t* resolve(ResolveCache& cache, uint32_t token, uint64_t addr, uint32_t length, uint32_t access,
                                 Requester who, bool local = false) const noexcept {
    const uint32_t i = index_of(token);
    if (i >= capacity_) return nullptr;
    // Acquire: pairs with end_slot_write()'s release, as the first load in read_index().
    if (i != cache.index || slots_[i].sequence.load(std::memory_order_acquire) != cache.sequence) [[unlikely]]
      return refill_and_resolve(cache, i, token, addr, length, access, who, local);
    return grant(cache.region, token, addr, length, access, who, local);
  }

  // Every check of resolve(), without asking for the range to be contiguous in memory: true for a range of a
  // paged region that resolve() gave no pointer for.
  [[nodiscard]] bool grants(uint32_t token, uint64_t addr, uint32_t length, uint32_t access, Requester who,
                            bool local) const noexcept {
    note_engine_read(index_of(token), who);
    MemoryRegion r;
    uint32_t sequence;
    return read_index(index_of(token), r, sequence) && permits(r, token, addr, length, access, who, local);
  }
  // Copies `length` bytes between `buffer` and [addr, addr + length) of the region `token` names (`into_region`:
  // from the buffer into the region), page by page, after every check of resolve(). False: a check failed and
  // nothing was copied.
  bool copy(uint32_t token, uint64_t addr, uint8_t* buffer, uint32_t length, uint32_t access, Requester who, bool local,
            bool into_region) const noexcept {
    note_engine_read(index_of(token), who);
    MemoryRegion r;
    uint32_t sequence;
    if (!read_index(index_of(token), r, sequence) || !permits(r, token, addr, length, access, who, local)) return false;
    uint64_t offset = addr - r.addr + r.first_offset;
    while (length > 0) {
      const uint32_t in_page = static_cast<uint32_t>(offset % kRegionPageSize);
      const uint32_t n = std::min(length, kRegionPageSize - in_page);
      auto* memory =
          r.pages == nullptr
              ? reinterpret_cast<uint8_t*>(addr)
              : reinterpret_cast<uint8_t*>(r.pages[offset / kRegionPageSize].load(std::memory_order_relaxed) + in_page);
      if (into_region) {
        std::memcpy(memory, buffer, n);
      } else {
        std::memcpy(buffer, memory, n);
      }
      buffer += n;
      addr += n;
      offset += n;
      length -= n;
    }
    return true;
  }

  // A consistent copy of the slot `token` names (valid or not), or nullopt if the token's index is out of
  // range, the slot holds another token, or a writer is changing it right now.
  [[nodiscard]] std::optional<MemoryRegion> read_slot(uint32_t token) const noexcept {
    std::optional<MemoryRegion> r = read_slot_at(index_of(token));
    if (r && r->token != token) r.reset();
    return r;
  }
  // The same for slot `index`, whatever token it holds now.
  [[nodiscard]] std::optional<MemoryRegion> read_slot_at(uint32_t index) const noexcept {
    MemoryRegion r;
    uint32_t sequence;
    if (!read_index(index, r, sequence)) return std::nullopt;
    return r;
  }

 private:
  // resolve()'s cache miss, out of line and reached by a tail call: the slot copy it makes needs registers that
  // the hit, a leaf, then does not save and restore on every call (12 instructions of ~50).
  [[gnu::noinline]] uint8_t* refill_and_resolve(ResolveCache& cache, uint32_t i, uint32_t token, uint64_t addr,
                                                uint32_t length, uint32_t access, Requester who,
                                                bool local) const noexcept {
    cache.index = i;
    note_engine_read(i, who);
    if (!read_index(i, cache.region, cache.sequence)) {
      cache.sequence = 1;
      return nullptr;
    }
    return grant(cache.region, token, addr, length, access, who, local);
  }
  // The checks of resolve() on a consistent copy of the slot: key, validity, PD (and a window's QP), rights and
  // range.
  [[nodiscard]] static bool permits(const MemoryRegion& r, uint32_t token, uint64_t addr, uint32_t length,
                                    uint32_t access, Requester who, bool local) noexcept {
    if (r.token != token || !r.valid || r.pd != who.pd || (r.access & access) != access) return false;
    if (r.kind != MemoryKind::kRegion) [[unlikely]] {  // one compare for the common kind
      if (local ? r.kind == MemoryKind::kWindow : r.kind == MemoryKind::kPrivileged) return false;
      if (r.kind == MemoryKind::kWindow && r.qpn != who.qpn) return false;
    }
    // Written to avoid overflow: addr - r.addr cannot wrap once addr >= r.addr.
    return addr >= r.addr && addr - r.addr <= r.length && length <= r.length - (addr - r.addr);
  }
  // resolve()'s answer on a consistent copy: the memory itself, or nullptr.
  [[nodiscard]] static uint8_t* grant(const MemoryRegion& r, uint32_t token, uint64_t addr, uint32_t length,
                                      uint32_t access, Requester who, bool local) noexcept {
    if (!permits(r, token, addr, length, access, who, local)) return nullptr;
    if (r.pages == nullptr) [[likely]]
      return reinterpret_cast<uint8_t*>(addr);
    return contiguous_pages(r, addr, length);
  }
  // A paged region's range as one pointer if its pages are adjacent in memory (always so within one page).
  [[nodiscard]] static uint8_t* contiguous_pages(const MemoryRegion& r, uint64_t addr, uint32_t length) noexcept {
    const uint64_t offset = addr - r.addr + r.first_offset;
    const uint64_t first = offset / kRegionPageSize;
    const uint64_t last = length == 0 ? first : (offset + length - 1) / kRegionPageSize;
    const uint64_t page = r.pages[first].load(std::memory_order_relaxed);
    for (uint64_t i = first + 1; i <= last; ++i)
      if (r.pages[i].load(std::memory_order_relaxed) != page + (i - first) * kRegionPageSize) return nullptr;
    return reinterpret_cast<uint8_t*>(page + offset % kRegionPageSize);
  }

  // Engine readers, before they read slot `i`: the engine running `who` (the QPN names it) may from now on hold a
  // pointer into the slot's memory (engines_that_may_hold()). Sticky: its bit is set once per slot and engine, never
  // cleared, so the RMW and its fence run once and the datapath's cost after that is a load of a line it reads
  // anyway. The fence orders the bit before the slot's read (a Dekker pair with engines_that_may_hold()). A bit
  // already set was published by the fence of whoever set it.
  static_assert(kMaxEngines <= 32, "a bit per engine in engines_read_");
  void note_engine_read(uint32_t i, Requester who) const noexcept {
    if (i >= capacity_) return;
    const uint32_t bit = 1U << engine_of(proto::Qpn{who.qpn});
    if ((engines_read_[i].load(std::memory_order_relaxed) & bit) == 0) [[unlikely]] {
      engines_read_[i].fetch_or(bit, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
  }

  // Copies slot `i` into `out` and returns true if the copy is consistent and the slot is in use; `sequence`
  // is the (even) sequence number the copy belongs to. Fills a caller's variable rather than returning an
  // optional: a returned optional went through the stack in narrow stores and came back in 16-byte loads,
  // which stalled on store forwarding on every resolve (12% of a 64-byte WRITE's time).
  [[gnu::always_inline]] bool read_index(uint32_t i, MemoryRegion& out, uint32_t& sequence) const noexcept {
    if (i >= capacity_) return false;
    const Slot& s = slots_[i];
    // Acquire: pairs with end_slot_write()'s release, so the fields below are at least that write's.
    sequence = s.sequence.load(std::memory_order_acquire);
    if (sequence & 1) return false;
    out = load_fields(s);
    // The acquire field loads keep this load after them; if the sequence moved, a writer overlapped the copy.
    return s.sequence.load(std::memory_order_relaxed) == sequence && out.kind != MemoryKind::kFree;
  }

 public:
  // --- datapath writers (engines): never wait; a concurrent writer of the same slot makes them fail ---
  // Send with Invalidate, and local invalidate from our own SQ (verbs LOCAL_INV), which follows the same rule:
  // invalidates `token` if it names a valid, remotely invalidatable region of the requester's
  // PD; a window only from the QP it was bound through (IBTA 10.6.7.2.6: a type-2 window is invalidated on its QP).
  // A fast-register region takes the windows bound onto it along (ndkpi.md §9.6: a window lies inside its MR): the
  // caller waits for the engines, then ends those windows with invalidate_windows_of()
  // (RcQueuePair::invalidate_and_wait), so that a bind which found the region valid on another engine has written its
  // window by then.
  bool invalidate_remote(uint32_t token, Requester who) noexcept {
    return modify(token, [&](const MemoryRegion& r, MemoryRegion&) {
      return r.valid && r.pd == who.pd && r.remotely_invalidatable() &&
             (r.kind != MemoryKind::kWindow || r.qpn == who.qpn);
    });
  }
  bool invalidate_local(uint32_t token, Requester who) noexcept { return invalidate_remote(token, who); }
  // After the region `region_token` was erased (control path) or invalidated (its engine): every valid window of
  // slots [1, end) bound onto it becomes invalid, as a local invalidate would make it. A slot another writer holds
  // right now is read again.
  // Returns whether it ended any.
  bool invalidate_windows_of(uint32_t region_token, uint32_t end) noexcept {
    bool ended = false;
    for (uint32_t i = 1; i < end && i < capacity_; ++i) {
      for (;;) {
        const Slot& s = slots_[i];
        const uint32_t sequence = s.sequence.load(std::memory_order_acquire);
        if (sequence & 1) continue;  // a writer holds the slot: read it again
        const MemoryRegion r = load_fields(s);
        if (s.sequence.load(std::memory_order_relaxed) != sequence) continue;
        if (r.kind != MemoryKind::kWindow || !r.valid || r.parent != region_token) break;
        if (modify(r.token, [](const MemoryRegion& w, MemoryRegion&) { return w.valid; })) {
          ended = true;
          break;
        }
      }
    }
    return ended;
  }
  // Fast register: the reserved fast-register slot of `pd` that the new token names becomes valid over
  // [addr, addr + length) with `access`. The slot must be invalid (a registered FR MR is invalidated first).
  // `page_list` 0: the region's bytes are at their addresses; otherwise the staged list (stage_pages()) that
  // makes it a paged region, copied into the slot's page map under the claim.
  bool fast_register(uint32_t new_token, uint64_t addr, uint64_t length, uint32_t access, uint32_t pd,
                     uint8_t page_list = 0) noexcept {
    const uint32_t index = index_of(new_token);
    const StagedPages* staged = nullptr;
    if (page_list != 0) {
      if (page_list > kStagedPageLists || index >= capacity_ || page_maps_[index] == nullptr) return false;
      staged = &page_maps_[index]->staged[page_list - 1];
      // The list must hold every byte of the region.
      if (staged->first_offset >= kRegionPageSize ||
          length > uint64_t{staged->count} * kRegionPageSize - staged->first_offset)
        return false;
    }
    return modify_slot(index, [&](const MemoryRegion& r, MemoryRegion& next, bool claimed) {
      if (r.kind != MemoryKind::kFastRegisterRegion || r.valid || r.pd != pd) return false;
      next.addr = addr;
      next.length = length;
      next.access = access;
      next.token = new_token;
      next.valid = true;
      next.pages = nullptr;
      next.first_offset = 0;
      if (staged != nullptr) {
        PageMap& map = *page_maps_[index];
        next.pages = map.active.data();
        next.first_offset = staged->first_offset;
        if (claimed)
          for (uint32_t i = 0; i < staged->count; ++i) map.active[i].store(staged->pages[i], std::memory_order_relaxed);
      }
      return true;
    });
  }
  // Type-2 window bind, by the QP `who`: the window slot the new token names becomes valid over
  // [addr, addr + length) with `access`, which must lie inside the valid region `region_token` of the same PD,
  // and serves that QP alone. The region must allow local write if the window allows remote write
  // (IBTA 10.6.7.2.1; NDK: remote-write MW needs a local-write MR).
  bool bind_window(uint32_t new_token, uint32_t region_token, uint64_t addr, uint64_t length, uint32_t access,
                   Requester who) noexcept {
    const uint32_t pd = who.pd;
    // Noted before the region is read (a Dekker pair with an invalidation's invalidate-then-check): either this
    // bind finds the region invalid, or the invalidating engine sees the note, waits for this engine and scans.
    note_window_bind(region_token);
    const std::optional<MemoryRegion> region = read_slot(region_token);
    if (!region || !region->valid || region->pd != pd || region->kind == MemoryKind::kWindow ||
        region->kind == MemoryKind::kPrivileged)
      return false;
    if (addr < region->addr || addr - region->addr > region->length || length > region->length - (addr - region->addr))
      return false;
    if ((access & proto::kAccessRemoteWrite) && !(region->access & proto::kAccessLocalWrite)) return false;
    bool rebound_valid_window = false;
    const bool bound = modify_slot(index_of(new_token), [&](const MemoryRegion& r, MemoryRegion& next, bool) {
      if (r.kind != MemoryKind::kWindow || r.pd != pd) return false;
      rebound_valid_window = r.valid;  // as this call sees it: the claimed check may see what the copy did not
      if (r.valid) {
        // Bound already (IBTA: a type-2 window is bound only when free): the bind fails. The poster has moved the
        // window's key on, so no invalidation could name the old binding any more; it ends here instead.
        next.valid = false;
        return true;
      }
      next.addr = addr;
      next.length = length;
      next.access = access;
      next.token = new_token;
      next.valid = true;
      next.qpn = who.qpn;
      next.parent = region_token;
      // A window on a paged region translates through the region's page map.
      next.pages = region->pages;
      next.first_offset = region->pages == nullptr ? 0 : region->first_offset + (addr - region->addr);
      return true;
    });
    return bound && !rebound_valid_window;
  }

 private:
  struct Slot {
    std::atomic<uint32_t> sequence{0};  // odd while a writer changes the slot
    std::atomic<uint64_t> addr{0};
    std::atomic<uint64_t> length{0};
    std::atomic<const std::atomic<uint64_t>*> pages{nullptr};
    std::atomic<uint64_t> first_offset{0};
    std::atomic<uint32_t> access{0};
    std::atomic<uint32_t> pd{0};
    std::atomic<uint32_t> token{0};
    std::atomic<MemoryKind> kind{MemoryKind::kFree};
    std::atomic<bool> valid{false};
    std::atomic<uint32_t> qpn{0};
    std::atomic<uint32_t> parent{0};
  };

  // Claims the slot for one writer: even -> odd (`before` keeps the even value). The field stores that follow
  // are releases, so none of them is visible before the odd sequence.
  static bool begin_slot_write(Slot& s, uint32_t& before) noexcept {
    before = s.sequence.load(std::memory_order_relaxed);
    return (before & 1) == 0 &&
           s.sequence.compare_exchange_strong(before, before + 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  // Publishes the fields: release, so a reader that acquires the new even sequence sees all of them. A writer
  // that changed nothing puts the old sequence back, so a reader that overlapped it still gets a valid copy
  // (the fields are the ones it saw before) rather than a spurious "invalid".
  static void end_slot_write(Slot& s, uint32_t before, bool changed) noexcept {
    s.sequence.store(changed ? before + 2 : before, std::memory_order_release);
  }

  static void store_fields(Slot& s, const MemoryRegion& r) noexcept {
    s.addr.store(r.addr, std::memory_order_release);
    s.length.store(r.length, std::memory_order_release);
    s.pages.store(r.pages, std::memory_order_release);
    s.first_offset.store(r.first_offset, std::memory_order_release);
    s.access.store(r.access, std::memory_order_release);
    s.pd.store(r.pd, std::memory_order_release);
    s.token.store(r.token, std::memory_order_release);
    s.kind.store(r.kind, std::memory_order_release);
    s.valid.store(r.valid, std::memory_order_release);
    s.qpn.store(r.qpn, std::memory_order_release);
    s.parent.store(r.parent, std::memory_order_release);
  }
  static MemoryRegion load_fields(const Slot& s) noexcept {
    MemoryRegion r;
    r.addr = s.addr.load(std::memory_order_acquire);
    r.length = s.length.load(std::memory_order_acquire);
    r.pages = s.pages.load(std::memory_order_acquire);
    r.first_offset = s.first_offset.load(std::memory_order_acquire);
    r.access = s.access.load(std::memory_order_acquire);
    r.pd = s.pd.load(std::memory_order_acquire);
    r.token = s.token.load(std::memory_order_acquire);
    r.kind = s.kind.load(std::memory_order_acquire);
    r.valid = s.valid.load(std::memory_order_acquire);
    r.qpn = s.qpn.load(std::memory_order_acquire);
    r.parent = s.parent.load(std::memory_order_acquire);
    return r;
  }

  // Engine writers: check on a copy first (a change that would not apply never disturbs readers), then claim
  // without waiting, check again and change under the claim. `change(current, next)` returns false to leave
  // the slot as it is; `claimed` is false for the check on the copy, true under the claim.
  template <class Change>
  bool modify_slot(uint32_t index, Change&& change) noexcept {
    MemoryRegion seen;
    uint32_t sequence;
    if (!read_index(index, seen, sequence)) return false;
    MemoryRegion scratch = seen;
    if (!change(seen, scratch, false)) return false;
    Slot& s = slots_[index];
    uint32_t before;
    if (!begin_slot_write(s, before)) return false;
    const MemoryRegion current = load_fields(s);
    MemoryRegion next = current;
    const bool changed = current.kind != MemoryKind::kFree && change(current, next, true);
    if (changed) store_fields(s, next);
    end_slot_write(s, before, changed);
    return changed;
  }
  template <class Check>
  bool modify(uint32_t token, Check&& may_invalidate) noexcept {
    return modify_slot(index_of(token), [&](const MemoryRegion& r, MemoryRegion& next, bool) {
      if (r.token != token || !may_invalidate(r, next)) return false;
      next.valid = false;
      return true;
    });
  }

  // A page list copied at post time for one FastRegister WQE. `pending` from the poster's claim until the WQE
  // retires; the engine only reads the rest.
  struct StagedPages {
    std::atomic<bool> pending{false};
    uint32_t count = 0;
    uint64_t first_offset = 0;
    std::array<uint64_t, kMaxRegionPages> pages{};
  };
  struct PageMap {
    std::array<std::atomic<uint64_t>, kMaxRegionPages> active{};  // the registration's pages (engines write)
    std::array<StagedPages, kStagedPageLists> staged{};
  };

  std::unique_ptr<Slot[]> slots_;
  std::unique_ptr<std::atomic<uint32_t>[]> tx_pins_;       // [slot]: zero-copy TX mbufs pointing into it
  std::unique_ptr<std::atomic<uint32_t>[]> engines_read_;  // [slot]: engines that have read it (note_engine_read)
  std::unique_ptr<std::atomic<bool>[]> windows_bound_;     // [slot]: a window was ever bound onto it (bind_window)
  std::unique_ptr<std::unique_ptr<PageMap>[]> page_maps_;  // [slot]: fast-register slots only, from first use
  uint32_t capacity_;
};

}  // namespace uroce::dataplane
