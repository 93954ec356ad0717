// A namespace backed by a file or a block device, and no poller ever waits for it: requests go to io_uring
// (liburing; the poller submits and reaps in its loop, the kernel does the work), or, where io_uring cannot be set
// up (containers whose seccomp profile blocks io_uring_setup, kernels without it), to a pool of worker threads
// (TBB) that run the system calls and queue their completions for the poller. Which one runs is decided when the
// backend opens and describe() says so, with the reason for a fallback.
//
// Semantics, as nvmet's file backend (drivers/nvme/target/io-cmd-file.c) has them: buffered I/O through the page
// cache, so Flush is fdatasync (IORING_OP_FSYNC with IORING_FSYNC_DATASYNC): every write acknowledged before a
// Flush was submitted is durable once the Flush completes. A write with FUA is written with RWF_DSYNC. Write Zeroes
// is fallocate(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE) and Dataset Management deallocate is
// fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE); where the file system or device refuses either
// (EOPNOTSUPP: tmpfs has no ZERO_RANGE, a block device without write-zeroes has no PUNCH_HOLE), the range is
// written with zeroes instead, so both always read back as zeroes (what Identify Namespace's DLFEAT promises).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

enum class FileIo : uint8_t {
  kAuto,           // io_uring, else worker threads
  kIoUring,        // io_uring or an error
  kWorkerThreads,  // worker threads even where io_uring works
};

struct FileBackendOptions {
  std::string path;          // a regular file or a block device
  uint64_t create_size = 0;  // bytes: create the file or extend it to this size (a larger file keeps its size);
                             // 0: the file must exist. Not for block devices.
  uint32_t block_size = 512;
  FileIo io = FileIo::kAuto;
  unsigned worker_threads = 2;  // the pool's size when it runs
  unsigned ring_entries = 256;  // io_uring's submission queue; its completion queue is twice as large
};

// The backend, or why not, naming the path ("/srv/ns1: does not exist (size_mb creates it)", "...: 1000 bytes is
// not a multiple of the block size 512", "...: cannot open for reading and writing: Permission denied").
[[nodiscard]] std::variant<std::shared_ptr<Backend>, std::string> open_file_backend(const FileBackendOptions& options);

}  // namespace uroce::nvmf
