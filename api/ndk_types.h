// NDKPI's values: NTSTATUS codes, flags, result and info structures, callback types (ndkpi.md §4-§8).
// Names and numbers are NDK's; structure members keep NDK's spelling so code reads like NDK code.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace uroce::ndk {

// ------------------------------------------------------------------------------------------- NTSTATUS (§7)
using NTSTATUS = int32_t;

constexpr NTSTATUS ntstatus(uint32_t value) noexcept { return static_cast<NTSTATUS>(value); }

inline constexpr NTSTATUS STATUS_SUCCESS = ntstatus(0x00000000);
inline constexpr NTSTATUS STATUS_PENDING = ntstatus(0x00000103);
inline constexpr NTSTATUS STATUS_BUFFER_OVERFLOW = ntstatus(0x80000005);
inline constexpr NTSTATUS STATUS_ACCESS_VIOLATION = ntstatus(0xC0000005);
inline constexpr NTSTATUS STATUS_INVALID_PARAMETER = ntstatus(0xC000000D);
inline constexpr NTSTATUS STATUS_INVALID_DEVICE_REQUEST = ntstatus(0xC0000010);
inline constexpr NTSTATUS STATUS_BUFFER_TOO_SMALL = ntstatus(0xC0000023);
inline constexpr NTSTATUS STATUS_INVALID_PARAMETER_MIX = ntstatus(0xC0000030);
inline constexpr NTSTATUS STATUS_DATA_OVERRUN = ntstatus(0xC000003C);
inline constexpr NTSTATUS STATUS_SHARING_VIOLATION = ntstatus(0xC0000043);
inline constexpr NTSTATUS STATUS_INSUFFICIENT_RESOURCES = ntstatus(0xC000009A);
inline constexpr NTSTATUS STATUS_IO_TIMEOUT = ntstatus(0xC00000B5);
inline constexpr NTSTATUS STATUS_NOT_SUPPORTED = ntstatus(0xC00000BB);
inline constexpr NTSTATUS STATUS_INTERNAL_ERROR = ntstatus(0xC00000E5);
inline constexpr NTSTATUS STATUS_CANCELLED = ntstatus(0xC0000120);
inline constexpr NTSTATUS STATUS_REMOTE_RESOURCES = ntstatus(0xC000013D);
inline constexpr NTSTATUS STATUS_INVALID_ADDRESS = ntstatus(0xC0000141);
inline constexpr NTSTATUS STATUS_CONNECTION_REFUSED = ntstatus(0xC0000236);
inline constexpr NTSTATUS STATUS_CONNECTION_INVALID = ntstatus(0xC000023A);
inline constexpr NTSTATUS STATUS_NETWORK_UNREACHABLE = ntstatus(0xC000023C);
inline constexpr NTSTATUS STATUS_HOST_UNREACHABLE = ntstatus(0xC000023D);
inline constexpr NTSTATUS STATUS_CONNECTION_ABORTED = ntstatus(0xC0000241);
inline constexpr NTSTATUS STATUS_TOO_MANY_ADDRESSES = ntstatus(0xC0000209);
inline constexpr NTSTATUS STATUS_ADDRESS_ALREADY_EXISTS = ntstatus(0xC000020A);
inline constexpr NTSTATUS STATUS_DEVICE_REMOVED = ntstatus(0xC00002B6);
inline constexpr NTSTATUS STATUS_IMPLEMENTATION_LIMIT = ntstatus(0xC000042B);
inline constexpr NTSTATUS NDIS_STATUS_BAD_VERSION = ntstatus(0xC0010004);

// The symbolic name of an NTSTATUS above, for messages; "unknown NTSTATUS" for any other value.
constexpr const char* NdkStatusName(NTSTATUS status) noexcept {
  switch (status) {
    case STATUS_SUCCESS:
      return "STATUS_SUCCESS";
    case STATUS_PENDING:
      return "STATUS_PENDING";
    case STATUS_BUFFER_OVERFLOW:
      return "STATUS_BUFFER_OVERFLOW";
    case STATUS_ACCESS_VIOLATION:
      return "STATUS_ACCESS_VIOLATION";
    case STATUS_INVALID_PARAMETER:
      return "STATUS_INVALID_PARAMETER";
    case STATUS_INVALID_DEVICE_REQUEST:
      return "STATUS_INVALID_DEVICE_REQUEST";
    case STATUS_BUFFER_TOO_SMALL:
      return "STATUS_BUFFER_TOO_SMALL";
    case STATUS_INVALID_PARAMETER_MIX:
      return "STATUS_INVALID_PARAMETER_MIX";
    case STATUS_DATA_OVERRUN:
      return "STATUS_DATA_OVERRUN";
    case STATUS_SHARING_VIOLATION:
      return "STATUS_SHARING_VIOLATION";
    case STATUS_INSUFFICIENT_RESOURCES:
      return "STATUS_INSUFFICIENT_RESOURCES";
    case STATUS_IO_TIMEOUT:
      return "STATUS_IO_TIMEOUT";
    case STATUS_NOT_SUPPORTED:
      return "STATUS_NOT_SUPPORTED";
    case STATUS_INTERNAL_ERROR:
      return "STATUS_INTERNAL_ERROR";
    case STATUS_CANCELLED:
      return "STATUS_CANCELLED";
    case STATUS_REMOTE_RESOURCES:
      return "STATUS_REMOTE_RESOURCES";
    case STATUS_INVALID_ADDRESS:
      return "STATUS_INVALID_ADDRESS";
    case STATUS_CONNECTION_REFUSED:
      return "STATUS_CONNECTION_REFUSED";
    case STATUS_CONNECTION_INVALID:
      return "STATUS_CONNECTION_INVALID";
    case STATUS_NETWORK_UNREACHABLE:
      return "STATUS_NETWORK_UNREACHABLE";
    case STATUS_HOST_UNREACHABLE:
      return "STATUS_HOST_UNREACHABLE";
    case STATUS_CONNECTION_ABORTED:
      return "STATUS_CONNECTION_ABORTED";
    case STATUS_TOO_MANY_ADDRESSES:
      return "STATUS_TOO_MANY_ADDRESSES";
    case STATUS_ADDRESS_ALREADY_EXISTS:
      return "STATUS_ADDRESS_ALREADY_EXISTS";
    case STATUS_DEVICE_REMOVED:
      return "STATUS_DEVICE_REMOVED";
    case STATUS_IMPLEMENTATION_LIMIT:
      return "STATUS_IMPLEMENTATION_LIMIT";
    case NDIS_STATUS_BAD_VERSION:
      return "NDIS_STATUS_BAD_VERSION";
    default:
      return "unknown NTSTATUS";
  }
}

// ---------------------------------------------------------------------------------------- objects (§2)
struct NdkVersion {
  uint16_t Major = 0;
  uint16_t Minor = 0;
};
inline constexpr NdkVersion kNdkVersion{1, 2};  // GetCqResultsEx, SendAndInvalidate, DEFER

enum NdkObjectType : uint32_t {
  NdkObjectTypeUndefined = 0,
  NdkObjectTypeAdapter = 1,
  NdkObjectTypeQp = 2,
  NdkObjectTypeCq = 3,
  NdkObjectTypeMr = 4,
  NdkObjectTypeMw = 5,
  NdkObjectTypePd = 6,
  NdkObjectTypeSharedEndpoint = 7,
  NdkObjectTypeConnector = 8,
  NdkObjectTypeListener = 9,
  NdkObjectTypeSrq = 10,
};

// GROUP_AFFINITY: CPUs `Mask` of processor group `Group` (group 0 = CPUs 0..63 here).
struct GroupAffinity {
  uint64_t Mask = 0;
  uint16_t Group = 0;
};

// ---------------------------------------------------------------------------------- callbacks (§8, §9.9)
class ObjectHeader;
using CreateCompletion = void (*)(void* context, NTSTATUS status, ObjectHeader* object);
using RequestCompletion = void (*)(void* context, NTSTATUS status);
using CloseCompletion = void (*)(void* context);
// SUCCESS: a completion matching the arm; BUFFER_OVERFLOW: the CQ overran (it is dead from then on).
using CqNotificationCallback = void (*)(void* context, NTSTATUS cq_status);
using SrqNotificationCallback = void (*)(void* context, NTSTATUS srq_status);

// -------------------------------------------------------------------------------------- datapath (§5)
using NdkLogicalAddress = uint64_t;  // here: a virtual address of this process (IOVA as VA)

// With the PD's privileged token (Pd::NdkGetPrivilegedMemoryRegionToken) the address is a LogicalAddress (from
// Adapter::NdkBuildLam); with any other token, a VirtualAddress inside the MR the token names.
struct NdkSge {  // NOLINT(cppcoreguidelines-pro-type-member-init): one member of the union is initialised
  union {
    void* VirtualAddress = nullptr;
    NdkLogicalAddress LogicalAddress;
  };
  uint32_t Length = 0;
  uint32_t MemoryRegionToken = 0;
};
// The SGE's address, whichever member the consumer wrote (both are the 8 bytes at offset 0).
inline uint64_t sge_address(const NdkSge& sge) noexcept {
  uint64_t address = 0;
  static_assert(sizeof(void*) == sizeof address && sizeof(NdkLogicalAddress) == sizeof address);
  std::memcpy(&address, &sge, sizeof address);
  return address;
}

// NDK_LOGICAL_ADDRESS_MAPPING (NdkBuildLam): a buffer's pages as logical addresses. Its size for n pages is
// ndk_lam_size(n).
struct NdkLogicalAddressMapping {
  void* AdapterContext = nullptr;  // provider-private
  uint32_t AdapterPageCount = 0;
  NdkLogicalAddress AdapterPageArray[1] = {};  // PAGE_SIZE-aligned pages, AdapterPageCount of them
};
inline constexpr std::size_t ndk_lam_size(uint32_t pages) noexcept {
  return offsetof(NdkLogicalAddressMapping, AdapterPageArray) + std::size_t{pages} * sizeof(NdkLogicalAddress);
}

// NdkQueryExtension (ndkpi.md §4): a GUID names an extension interface. No standard extension exists.
struct NdkGuid {
  uint32_t Data1 = 0;
  uint16_t Data2 = 0;
  uint16_t Data3 = 0;
  std::array<uint8_t, 8> Data4{};
};
struct NdkExtensionInterface {
  const void* Dispatch = nullptr;
};

struct NdkResult {
  NTSTATUS Status = STATUS_SUCCESS;
  uint32_t BytesTransferred = 0;  // valid for receives
  void* QPContext = nullptr;
  void* RequestContext = nullptr;
};

enum NdkOperationType : uint32_t {
  NdkOperationTypeReceive = 1,
  NdkOperationTypeReceiveAndInvalidate = 32769,  // 0x8001
  NdkOperationTypeSend = 2,
  NdkOperationTypeFastRegister = 4,
  NdkOperationTypeBind = 8,
  NdkOperationTypeInvalidate = 16,
  NdkOperationTypeRead = 32,
  NdkOperationTypeWrite = 64,
};

struct NdkResultEx {
  NTSTATUS Status = STATUS_SUCCESS;
  uint32_t BytesTransferred = 0;
  void* QPContext = nullptr;
  void* RequestContext = nullptr;
  NdkOperationType Type = NdkOperationTypeReceive;
  uint32_t ProviderErrorCode = 0;              // 0 on success; else the verbs-numbered transport status
  uintptr_t TypeSpecificCompletionOutput = 0;  // ReceiveAndInvalidate: the invalidated token
};

// --------------------------------------------------------------------------------------- flags (§6)
inline constexpr uint32_t NDK_OP_FLAG_SILENT_SUCCESS = 0x001;
inline constexpr uint32_t NDK_OP_FLAG_READ_FENCE = 0x002;
inline constexpr uint32_t NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT = 0x004;
inline constexpr uint32_t NDK_OP_FLAG_ALLOW_REMOTE_READ = 0x008;
inline constexpr uint32_t NDK_OP_FLAG_ALLOW_LOCAL_WRITE = 0x010;
inline constexpr uint32_t NDK_OP_FLAG_ALLOW_REMOTE_WRITE = 0x030;  // includes ALLOW_LOCAL_WRITE
inline constexpr uint32_t NDK_OP_FLAG_INLINE = 0x040;
inline constexpr uint32_t NDK_OP_FLAG_RDMA_READ_SINK = 0x080;
inline constexpr uint32_t NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE = 0x100;
inline constexpr uint32_t NDK_OP_FLAG_DEFER = 0x200;

inline constexpr uint32_t NDK_MR_FLAG_ALLOW_LOCAL_READ = 0x0;  // implicit
inline constexpr uint32_t NDK_MR_FLAG_ALLOW_LOCAL_WRITE = 0x1;
inline constexpr uint32_t NDK_MR_FLAG_ALLOW_REMOTE_READ = 0x2;
inline constexpr uint32_t NDK_MR_FLAG_ALLOW_REMOTE_WRITE = 0x5;  // includes ALLOW_LOCAL_WRITE
inline constexpr uint32_t NDK_MR_FLAG_RDMA_READ_SINK = 0x8;

inline constexpr uint32_t NDK_CQ_NOTIFY_ERRORS = 0;
inline constexpr uint32_t NDK_CQ_NOTIFY_ANY = 1;
inline constexpr uint32_t NDK_CQ_NOTIFY_SOLICITED = 2;

// ------------------------------------------------------------------------------------- adapter (§4)
enum NdkRdmaTechnology : uint32_t { NdkUndefined = 0, NdkiWarp, NdkInfiniBand, NdkRoCE, NdkRoCEv2, NdkMaxTechnology };

inline constexpr uint32_t NDK_ADAPTER_FLAG_IN_ORDER_DMA_SUPPORTED = 0x1;
inline constexpr uint32_t NDK_ADAPTER_FLAG_RDMA_READ_SINK_NOT_REQUIRED = 0x2;
inline constexpr uint32_t NDK_ADAPTER_FLAG_CQ_INTERRUPT_MODERATION_SUPPORTED = 0x4;
inline constexpr uint32_t NDK_ADAPTER_FLAG_MULTI_ENGINE_SUPPORTED = 0x8;
inline constexpr uint32_t NDK_ADAPTER_FLAG_RDMA_READ_LOCAL_INVALIDATE_SUPPORTED = 0x10;
inline constexpr uint32_t NDK_ADAPTER_FLAG_CQ_RESIZE_SUPPORTED = 0x100;
inline constexpr uint32_t NDK_ADAPTER_FLAG_LOOPBACK_CONNECTIONS_SUPPORTED = 0x10000;

struct NdkAdapterInfo {
  NdkVersion Version{};
  uint32_t VendorId = 0;
  uint32_t DeviceId = 0;
  std::size_t MaxRegistrationSize = 0;
  std::size_t MaxWindowSize = 0;
  uint32_t FRMRPageCount = 0;
  uint32_t MaxInitiatorRequestSge = 0;
  uint32_t MaxReceiveRequestSge = 0;
  uint32_t MaxReadRequestSge = 0;
  uint32_t MaxTransferLength = 0;
  uint32_t MaxInlineDataSize = 0;
  uint32_t MaxInboundReadLimit = 0;
  uint32_t MaxOutboundReadLimit = 0;
  uint32_t MaxReceiveQueueDepth = 0;
  uint32_t MaxInitiatorQueueDepth = 0;
  uint32_t MaxSrqDepth = 0;
  uint32_t MaxCqDepth = 0;
  uint32_t LargeRequestThreshold = 0;
  uint32_t MaxCallerData = 0;
  uint32_t MaxCalleeData = 0;
  uint32_t AdapterFlags = 0;
  NdkRdmaTechnology RdmaTechnology = NdkUndefined;
};

}  // namespace uroce::ndk
