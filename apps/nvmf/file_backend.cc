#include "apps/nvmf/file_backend.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <liburing.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <tbb/concurrent_queue.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>
#include <unistd.h>

namespace uroce::nvmf {

namespace {

constexpr uint64_t kZeroChunk = uint64_t{1} << 20;   // zeroes written per request where fallocate cannot
constexpr uint64_t kMaxIoChunk = uint64_t{1} << 30;  // one read or write system call at most
constexpr int kZeroRangeMode = FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;
constexpr int kPunchHoleMode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;

std::string errno_text(int error) { return std::strerror(error); }  // NOLINT(concurrency-mt-unsafe): control path

// What both variants share: the open descriptor, its size, and the system calls of one request run to the end
// (the worker threads' whole job; io_uring's backend issues the same steps as SQEs).
class FileBackendBase : public Backend {
 public:
  FileBackendBase(int fd, uint64_t size, bool block_device, std::string path)
      : fd_(fd), size_(size), block_device_(block_device), path_(std::move(path)) {
    zeroes_.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kZeroChunk)));
    if (zeroes_) std::memset(zeroes_.get(), 0, kZeroChunk);
  }
  ~FileBackendBase() override { ::close(fd_); }
  FileBackendBase(const FileBackendBase&) = delete;
  FileBackendBase& operator=(const FileBackendBase&) = delete;
  [[nodiscard]] uint64_t size() const override { return size_; }
  [[nodiscard]] bool ready() const { return zeroes_ != nullptr; }

 protected:
  [[nodiscard]] std::string what() const {
    return (block_device_ ? "block device " : "file ") + path_ + " (" + std::to_string(size_ >> 20) + " MiB)";
  }
  [[nodiscard]] bool inside(const BackendRequest& r) const { return r.offset <= size_ && r.length <= size_ - r.offset; }
  // fallocate's mode for a Write Zeroes or deallocate, while the file system has not refused it.
  std::atomic<bool>& fallocate_works(BackendOp op) { return op == BackendOp::kDeallocate ? punch_hole_ : zero_range_; }

  // The whole request with blocking system calls (a worker thread's job): 0 or a negative errno.
  int run_sync(const BackendRequest& r) {
    if (r.op != BackendOp::kFlush && !inside(r)) return -EINVAL;
    switch (r.op) {
      case BackendOp::kRead:
        return transfer(r, false);
      case BackendOp::kWrite:
        return transfer(r, true);
      case BackendOp::kFlush:
        return ::fdatasync(fd_) == 0 ? 0 : -errno;
      default: {
        if (r.length == 0) return 0;
        std::atomic<bool>& works = fallocate_works(r.op);
        if (works.load(std::memory_order_relaxed)) {
          const int mode = r.op == BackendOp::kDeallocate ? kPunchHoleMode : kZeroRangeMode;
          if (::fallocate(fd_, mode, static_cast<off_t>(r.offset), static_cast<off_t>(r.length)) == 0) return 0;
          if (errno != EOPNOTSUPP) return -errno;
          works.store(false, std::memory_order_relaxed);
        }
        for (uint64_t done = 0; done < r.length;) {
          const uint64_t n = std::min(kZeroChunk, r.length - done);
          const ssize_t w = ::pwrite(fd_, zeroes_.get(), n, static_cast<off_t>(r.offset + done));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) return w < 0 ? -errno : -EIO;
          done += static_cast<uint64_t>(w);
        }
        return 0;
      }
    }
  }

  int fd_;
  uint64_t size_;
  bool block_device_;
  std::string path_;
  std::unique_ptr<uint8_t, decltype(&std::free)> zeroes_{nullptr, &std::free};
  std::atomic<bool> zero_range_{true};
  std::atomic<bool> punch_hole_{true};

 private:
  int transfer(const BackendRequest& r, bool write) {
    for (uint64_t done = 0; done < r.length;) {
      iovec v{r.data + done, static_cast<std::size_t>(std::min(kMaxIoChunk, r.length - done))};
      const off_t at = static_cast<off_t>(r.offset + done);
      const ssize_t n = write ? ::pwritev2(fd_, &v, 1, at, r.fua ? RWF_DSYNC : 0) : ::preadv2(fd_, &v, 1, at, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n < 0 ? -errno : -EIO;  // 0: the file shrank under us
      done += static_cast<uint64_t>(n);
    }
    return 0;
  }
};

// --- Worker threads ---------------------------------------------------------------------------------------------

class ThreadFileBackend final : public FileBackendBase {
 public:
  ThreadFileBackend(int fd, uint64_t size, bool block_device, std::string path, unsigned threads, std::string why)
      : FileBackendBase(fd, size, block_device, std::move(path)),
        threads_(usable_threads(threads)),
        arena_(static_cast<int>(threads_), 0),
        why_(std::move(why)) {}
  ~ThreadFileBackend() override {
    // Teardown only: the transport has waited for its commands; anything else still running finishes first.
    while (running_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ThreadFileBackend(const ThreadFileBackend&) = delete;
  ThreadFileBackend& operator=(const ThreadFileBackend&) = delete;

  [[nodiscard]] int submit(const BackendRequest& request) override {
    if (request.op != BackendOp::kFlush && !inside(request)) return -EINVAL;
    running_.fetch_add(1, std::memory_order_relaxed);
    arena_.enqueue([this, request] {
      done_.push(BackendCompletion{request.context, run_sync(request)});
      running_.fetch_sub(1, std::memory_order_release);  // last: the destructor may run once it reads 0
    });
    return kBackendPending;
  }
  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> out) override {
    std::size_t n = 0;
    while (n < out.size() && done_.try_pop(out[n])) ++n;
    return n;
  }
  [[nodiscard]] std::string describe() const override {
    return what() + " through " + std::to_string(threads_) + " worker threads" +
           (why_.empty() ? "" : " (" + why_ + ")");
  }

 private:
  // TBB lends an arena at most its global worker limit (the CPUs but one) unless a global_control raises it.
  static unsigned usable_threads(unsigned wanted) {
    const int workers = std::max(tbb::info::default_concurrency() - 1, 1);
    return std::clamp(wanted, 1U, static_cast<unsigned>(workers));
  }

  unsigned threads_;
  tbb::task_arena arena_;
  std::string why_;  // why not io_uring
  tbb::concurrent_queue<BackendCompletion> done_;
  std::atomic<uint32_t> running_{0};
};

// --- io_uring ---------------------------------------------------------------------------------------------------

class UringFileBackend final : public FileBackendBase {
 public:
  UringFileBackend(int fd, uint64_t size, bool block_device, std::string path, const io_uring& ring)
      : FileBackendBase(fd, size, block_device, std::move(path)), ring_(ring), cq_entries_(ring.cq.ring_entries) {}
  ~UringFileBackend() override {
    // Teardown only: wait for the kernel to finish what it holds (its buffers are the transport's).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::array<BackendCompletion, 32> sink;
    while ((in_ring_ != 0 || !backlog_.empty()) && std::chrono::steady_clock::now() < deadline) {
      if (poll(sink) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    io_uring_queue_exit(&ring_);
  }
  UringFileBackend(const UringFileBackend&) = delete;
  UringFileBackend& operator=(const UringFileBackend&) = delete;

  [[nodiscard]] int submit(const BackendRequest& request) override {
    if (request.op != BackendOp::kFlush && !inside(request)) return -EINVAL;
    if ((request.op == BackendOp::kWriteZeroes || request.op == BackendOp::kDeallocate) && request.length == 0)
      return 0;
    if (free_.empty()) {  // grows to the most requests ever in flight, then allocates no more
      jobs_.push_back(std::make_unique<Job>());
      free_.push_back(jobs_.back().get());
    }
    Job* job = free_.back();
    free_.pop_back();
    *job = Job{request, 0, false};
    if (!backlog_.empty() || !start(*job)) backlog_.push_back(job);  // in order behind what waits already
    return kBackendPending;
  }

  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> out) override {
    while (!backlog_.empty() && start(*backlog_.front())) backlog_.pop_front();
    if (prepared_ != 0) {
      const int submitted = io_uring_submit(&ring_);  // never waits: no IORING_ENTER_GETEVENTS
      if (submitted > 0) prepared_ -= std::min(prepared_, static_cast<unsigned>(submitted));
    }
    std::size_t n = 0;
    unsigned head = 0, seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (n == out.size()) break;
      ++seen;
      --in_ring_;
      step(*static_cast<Job*>(io_uring_cqe_get_data(cqe)), cqe->res, out, n);
    }
    io_uring_cq_advance(&ring_, seen);
    return n;
  }

  [[nodiscard]] std::string describe() const override { return what() + " through io_uring"; }

 private:
  struct Job {
    BackendRequest request;
    uint64_t done = 0;         // bytes read or written so far
    bool zero_writes = false;  // fallocate was refused: zeroes are written instead
  };

  // Prepares the job's next SQE, unless the ring is full or its completion queue could overflow.
  bool start(Job& job) {
    if (in_ring_ >= cq_entries_) return false;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    const BackendRequest& r = job.request;
    const uint64_t at = r.offset + job.done;
    const auto left = static_cast<unsigned>(std::min(kMaxIoChunk, r.length - job.done));
    switch (r.op) {
      case BackendOp::kRead:
        io_uring_prep_read(sqe, fd_, r.data + job.done, left, at);
        break;
      case BackendOp::kWrite:
        io_uring_prep_write(sqe, fd_, r.data + job.done, left, at);
        if (r.fua) sqe->rw_flags = RWF_DSYNC;
        break;
      case BackendOp::kFlush:
        io_uring_prep_fsync(sqe, fd_, IORING_FSYNC_DATASYNC);
        break;
      default:
        if (!job.zero_writes && fallocate_works(r.op).load(std::memory_order_relaxed)) {
          io_uring_prep_fallocate(sqe, fd_, r.op == BackendOp::kDeallocate ? kPunchHoleMode : kZeroRangeMode,
                                  static_cast<off_t>(r.offset), static_cast<off_t>(r.length));
        } else {
          job.zero_writes = true;
          io_uring_prep_write(sqe, fd_, zeroes_.get(), static_cast<unsigned>(std::min(kZeroChunk, r.length - job.done)),
                              at);
        }
        break;
    }
    io_uring_sqe_set_data(sqe, &job);
    ++in_ring_;
    ++prepared_;
    return true;
  }

  // One SQE of `job` completed with `res`: the next step, or the request's completion into out[n].
  void step(Job& job, int res, std::span<BackendCompletion> out, std::size_t& n) {
    const BackendRequest& r = job.request;
    const bool zeroing = r.op == BackendOp::kWriteZeroes || r.op == BackendOp::kDeallocate;
    if (res == -EAGAIN || res == -EINTR) return backlog_.push_back(&job);  // the same step again
    if (zeroing && !job.zero_writes && res == -EOPNOTSUPP) {
      fallocate_works(r.op).store(false, std::memory_order_relaxed);
      job.zero_writes = true;
      return backlog_.push_back(&job);
    }
    const bool transfers = r.op == BackendOp::kRead || r.op == BackendOp::kWrite || job.zero_writes;
    if (res >= 0 && transfers) {
      if (res == 0) {
        res = -EIO;  // nothing moved inside the file's size: it shrank under us
      } else {
        job.done += static_cast<uint64_t>(res);
        if (job.done < r.length) return backlog_.push_back(&job);  // a short transfer: the rest
        res = 0;
      }
    }
    out[n++] = BackendCompletion{r.context, std::min(res, 0)};
    free_.push_back(&job);
  }

  io_uring ring_;
  unsigned cq_entries_;
  unsigned in_ring_ = 0;   // SQEs prepared or submitted whose CQE has not been seen
  unsigned prepared_ = 0;  // SQEs prepared, not yet submitted
  std::vector<std::unique_ptr<Job>> jobs_;
  std::vector<Job*> free_;
  std::deque<Job*> backlog_;  // waiting for room in the ring, or for their next step
};

// io_uring's ring, or why not: it must set up and know every opcode the backend issues.
std::variant<io_uring, std::string> make_ring(unsigned entries) {
  io_uring ring{};
  if (const int e = io_uring_queue_init(entries, &ring, 0); e < 0) return "io_uring_setup: " + errno_text(-e);
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  std::string missing;
  for (const auto& [op, name] : {std::pair{IORING_OP_READ, "IORING_OP_READ"},
                                 {IORING_OP_WRITE, "IORING_OP_WRITE"},
                                 {IORING_OP_FSYNC, "IORING_OP_FSYNC"},
                                 {IORING_OP_FALLOCATE, "IORING_OP_FALLOCATE"}}) {
    if (probe == nullptr || !io_uring_opcode_supported(probe, op)) missing = name;
  }
  if (probe != nullptr) io_uring_free_probe(probe);
  if (!missing.empty()) {
    io_uring_queue_exit(&ring);
    return "the kernel's io_uring lacks " + missing;
  }
  return ring;
}

}  // namespace

std::variant<std::shared_ptr<Backend>, std::string> open_file_backend(const FileBackendOptions& o) {
  const std::string& path = o.path;
  if (path.empty()) return std::string("no path");
  if (o.block_size != 512 && o.block_size != 4096) return path + ": the block size is 512 or 4096";
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return path + ": " + errno_text(errno);
  if (!exists && o.create_size == 0) return path + ": does not exist (size_mb creates it)";
  if (exists && S_ISDIR(st.st_mode)) return path + ": is a directory";
  if (exists && !S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) return path + ": is neither a file nor a block device";
  const bool block_device = exists && S_ISBLK(st.st_mode);
  if (block_device && o.create_size != 0) return path + ": size_mb is for files (a block device has its own size)";
  if (o.create_size % o.block_size != 0)
    return path + ": size_mb is not a multiple of the block size " + std::to_string(o.block_size);

  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (o.create_size != 0 ? O_CREAT : 0), 0644);
  if (fd < 0) return path + ": cannot open for reading and writing: " + errno_text(errno);
  auto fail = [fd](std::string message) {
    ::close(fd);
    return message;
  };
  uint64_t size = 0;
  if (block_device) {
    if (::ioctl(fd, BLKGETSIZE64, &size) != 0) return fail(path + ": BLKGETSIZE64: " + errno_text(errno));
    // A device with larger logical blocks (4Kn) refuses a write zeroes or a deallocate of 512-byte granularity
    // (EINVAL, not the EOPNOTSUPP that falls back to writing zeroes): the namespace's blocks are at least its own.
    int logical = 0;
    if (::ioctl(fd, BLKSSZGET, &logical) != 0) return fail(path + ": BLKSSZGET: " + errno_text(errno));
    if (o.block_size < static_cast<uint32_t>(logical)) {
      return fail(path + ": the device's logical block size is " + std::to_string(logical) +
                  ": block_size must be at least that");
    }
  } else {
    if (::fstat(fd, &st) != 0) return fail(path + ": " + errno_text(errno));
    size = static_cast<uint64_t>(st.st_size);
    if (size < o.create_size) {
      if (::ftruncate(fd, static_cast<off_t>(o.create_size)) != 0)
        return fail(path + ": cannot extend to " + std::to_string(o.create_size) + " bytes: " + errno_text(errno));
      size = o.create_size;
    }
  }
  if (size == 0) return fail(path + ": is empty (size_mb gives it a size)");
  if (size % o.block_size != 0) {
    return fail(path + ": " + std::to_string(size) + " bytes is not a multiple of the block size " +
                std::to_string(o.block_size));
  }
  std::vector<uint8_t> first(o.block_size);
  if (::pread(fd, first.data(), first.size(), 0) != static_cast<ssize_t>(first.size()))
    return fail(path + ": cannot read its first block: " + errno_text(errno));

  std::shared_ptr<FileBackendBase> backend;
  std::string why_not_uring;
  if (o.io != FileIo::kWorkerThreads) {
    auto ring = make_ring(std::max(o.ring_entries, 8U));
    if (auto* r = std::get_if<io_uring>(&ring)) {
      backend = std::make_shared<UringFileBackend>(fd, size, block_device, path, *r);
    } else {
      why_not_uring = std::get<std::string>(ring);
      if (o.io == FileIo::kIoUring) return fail(path + ": " + why_not_uring);
    }
  }
  if (!backend)
    backend = std::make_shared<ThreadFileBackend>(fd, size, block_device, path, o.worker_threads, why_not_uring);
  if (!backend->ready()) return path + ": no memory";
  return std::shared_ptr<Backend>(std::move(backend));
}

}  // namespace uroce::nvmf
