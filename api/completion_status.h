// Transport completion statuses (proto::CompletionStatus, numbered as ibv_wc_status) to NTSTATUS, in one
// table. NDK has no per-operation error table of its own; this follows ND v2's semantics as ndkpi.md §11
// derives them, with the reason for each row.
#pragma once

#include <array>

#include "api/ndk_types.h"
#include "proto/rc_types.h"

namespace uroce::ndk::detail {

struct CompletionStatusRow {
  proto::CompletionStatus transport;
  NTSTATUS initiator;  // send, write, read, bind, fast register, invalidate
  NTSTATUS receive;
};

using proto::CompletionStatus;
inline constexpr std::array kCompletionStatusTable{
    // §7, §11: success is success.
    CompletionStatusRow{CompletionStatus::kSuccess, STATUS_SUCCESS, STATUS_SUCCESS},
    // §11 LOC_LEN_ERR: "on receive -> BUFFER_OVERFLOW (§7: send larger than receive buffer), on
    // send/read/write -> DATA_OVERRUN".
    CompletionStatusRow{CompletionStatus::kLocalLengthError, STATUS_DATA_OVERRUN, STATUS_BUFFER_OVERFLOW},
    // We produce LOC_QP_OP_ERR only for malformed local operations (invalidating a key that is not valid,
    // fast-registering an MR that is), as rxe does; §7 gives ND v2's "malformed WR, e.g. invalidating an
    // unbound MW" as INVALID_DEVICE_REQUEST. (§11's LOC_QP_OP -> INTERNAL_ERROR is about device faults.)
    CompletionStatusRow{CompletionStatus::kLocalQpOperationError, STATUS_INVALID_DEVICE_REQUEST,
                        STATUS_INVALID_DEVICE_REQUEST},
    // §11 LOC_PROT_ERR -> ACCESS_VIOLATION (§7: a bad local SGE).
    CompletionStatusRow{CompletionStatus::kLocalProtectionError, STATUS_ACCESS_VIOLATION, STATUS_ACCESS_VIOLATION},
    // §9.6 NdkFlush and §11: flushed work completes with CANCELLED.
    CompletionStatusRow{CompletionStatus::kWorkRequestFlushed, STATUS_CANCELLED, STATUS_CANCELLED},
    // §11 MW_BIND_ERR -> ACCESS_VIOLATION (§9.6 NdkBind: insufficient MR rights).
    CompletionStatusRow{CompletionStatus::kMemoryWindowBindError, STATUS_ACCESS_VIOLATION, STATUS_ACCESS_VIOLATION},
    // §11 BAD_RESP -> INTERNAL_ERROR: the peer broke the protocol.
    CompletionStatusRow{CompletionStatus::kBadResponse, STATUS_INTERNAL_ERROR, STATUS_INTERNAL_ERROR},
    // A local access error is the local side of a protection problem, as LOC_PROT_ERR.
    CompletionStatusRow{CompletionStatus::kLocalAccessError, STATUS_ACCESS_VIOLATION, STATUS_ACCESS_VIOLATION},
    // §11 REM_INV_REQ / REM_ACCESS / REM_OP -> REMOTE_RESOURCES (§7: = ND v2's ND_REMOTE_ERROR; §9.6 NdkRead:
    // reading past the remote region).
    CompletionStatusRow{CompletionStatus::kRemoteInvalidRequest, STATUS_REMOTE_RESOURCES, STATUS_REMOTE_RESOURCES},
    CompletionStatusRow{CompletionStatus::kRemoteAccessError, STATUS_REMOTE_RESOURCES, STATUS_REMOTE_RESOURCES},
    CompletionStatusRow{CompletionStatus::kRemoteOperationalError, STATUS_REMOTE_RESOURCES, STATUS_REMOTE_RESOURCES},
    // §11 RETRY_EXC / RNR_RETRY_EXC -> IO_TIMEOUT (§7: retries exhausted).
    CompletionStatusRow{CompletionStatus::kRetryExceeded, STATUS_IO_TIMEOUT, STATUS_IO_TIMEOUT},
    CompletionStatusRow{CompletionStatus::kRnrRetryExceeded, STATUS_IO_TIMEOUT, STATUS_IO_TIMEOUT},
};

// Anything not in the table (none today) is a provider fault: INTERNAL_ERROR (§7: fatal error).
constexpr NTSTATUS ntstatus_of(proto::CompletionStatus status, bool is_receive) noexcept {
  for (const CompletionStatusRow& row : kCompletionStatusTable)
    if (row.transport == status) return is_receive ? row.receive : row.initiator;
  return STATUS_INTERNAL_ERROR;
}

static_assert(ntstatus_of(CompletionStatus::kWorkRequestFlushed, false) == STATUS_CANCELLED);
static_assert(ntstatus_of(CompletionStatus::kLocalLengthError, true) == STATUS_BUFFER_OVERFLOW);

}  // namespace uroce::ndk::detail
