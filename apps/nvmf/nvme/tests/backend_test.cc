// The backends behind namespaces, asynchronous as the target drives them: the file backend through io_uring and
// through its worker-thread fallback (each on ext4 under /tmp and on tmpfs under /dev/shm, where fallocate's
// ZERO_RANGE is refused and zeroes are written instead), served by the target to a host; what a Flush makes
// durable, seen through a descriptor of its own; requests beyond the ring's size; the open errors and the `nvmf:`
// configuration keys; and backend failures (an injected EIO, ENOSPC, EINVAL) answered with the status the NVMe
// specification names, counted as media errors, including for a queue that closed while its command ran.
#include <gtest/gtest.h>

#include <cerrno>
#include <deque>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <variant>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apps/nvmf/file_backend.h"
#include "apps/nvmf/nvme/tests/nvme_host.h"
#include "apps/nvmf/nvmf_config.h"

namespace uroce::nvmf::testing {
namespace {

namespace fs = std::filesystem;

inline constexpr NvmeStatus kWriteFault = 0x0280;
inline constexpr NvmeStatus kUnrecoveredReadError = 0x0281;
inline constexpr NvmeStatus kCapacityExceeded = 0x4081;

class TempDir {
 public:
  explicit TempDir(const std::string& base) {
    std::string pattern = base + "/uroce-nvmf-test.XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The file's bytes through a descriptor of its own (what another process, or the file after a restart, sees).
std::vector<uint8_t> read_fresh(const std::string& path, uint64_t offset, std::size_t length) {
  std::vector<uint8_t> bytes(length, 0xEE);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t n = ::pread(fd, bytes.data(), length, static_cast<off_t>(offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(length)) return {};
  return bytes;
}

std::vector<uint8_t> pattern(std::size_t length, uint8_t seed) {
  std::vector<uint8_t> bytes(length);
  for (std::size_t i = 0; i < length; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
  return bytes;
}

bool all_zero(std::span<const uint8_t> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

// Submits every request and polls until all completed (30 s at most); the results in request order.
std::vector<int> run_requests(Backend& backend, std::vector<BackendRequest> requests) {
  std::vector<int> results(requests.size(), kBackendPending);
  std::size_t pending = 0;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].context = &results[i];
    results[i] = backend.submit(requests[i]);
    if (results[i] == kBackendPending) ++pending;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::array<BackendCompletion, 8> done;
  while (pending != 0 && std::chrono::steady_clock::now() < deadline) {
    const std::size_t n = backend.poll(done);
    for (std::size_t i = 0; i < n; ++i) *static_cast<int*>(done[i].context) = done[i].result;
    pending -= n;
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return results;
}

BackendRequest request(BackendOp op, uint64_t offset, uint64_t length, uint8_t* data = nullptr, bool fua = false) {
  BackendRequest r;
  r.op = op;
  r.offset = offset;
  r.length = length;
  r.data = data;
  r.fua = fua;
  return r;
}

struct Mode {
  FileIo io;
  const char* dir;
};
std::string mode_name(const ::testing::TestParamInfo<Mode>& info) {
  return std::string(info.param.io == FileIo::kIoUring ? "IoUring" : "WorkerThreads") +
         (std::string(info.param.dir) == "/tmp" ? "Ext4Tmp" : "TmpfsShm");
}

class FileBackendTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (dir_.path().empty()) GTEST_SKIP() << "no " << GetParam().dir;
    path_ = dir_.path() + "/ns.img";
  }
  // Opens (creating) the file; skips when io_uring cannot run here, naming the reason.
  std::shared_ptr<Backend> open(uint64_t size, uint32_t block_size, unsigned ring_entries = 256) {
    FileBackendOptions o;
    o.path = path_;
    o.create_size = size;
    o.block_size = block_size;
    o.io = GetParam().io;
    o.ring_entries = ring_entries;
    auto opened = open_file_backend(o);
    if (auto* error = std::get_if<std::string>(&opened)) {
      if (GetParam().io == FileIo::kIoUring && error->find("io_uring") != std::string::npos) {
        skipped_ = *error;
        return nullptr;
      }
      ADD_FAILURE() << *error;
      return nullptr;
    }
    auto backend = std::get<std::shared_ptr<Backend>>(opened);
    EXPECT_NE(backend->describe().find(GetParam().io == FileIo::kIoUring ? "io_uring" : "worker threads"),
              std::string::npos)
        << backend->describe();
    return backend;
  }

  TempDir dir_{GetParam().dir};
  std::string path_;
  std::string skipped_;
};

#define OPEN_OR_SKIP(var, ...)                     \
  auto var = open(__VA_ARGS__);                    \
  if (!skipped_.empty()) GTEST_SKIP() << skipped_; \
  ASSERT_TRUE(var)

TEST_P(FileBackendTest, TheTargetServesAFileNamespaceAndFlushMakesWritesVisibleToAFreshDescriptor) {
  OPEN_OR_SKIP(backend, 4u << 20, 512);
  TargetConfig config;
  SubsystemConfig sub;
  sub.nqn = kSubsystemNqn;
  sub.namespaces.push_back({.nsid = 1, .block_size = 512, .backend = backend});
  config.subsystems.push_back(sub);
  NvmfTarget target(config);
  Host admin(target, 0);
  const uint16_t cntlid = admin.connect_and_enable(0);
  ASSERT_NE(cntlid, 0);
  const Exchange ns = admin.run(identify(0x00, 1));
  EXPECT_EQ(get64(ns.data, 0), 8192U);  // 4 MiB of 512-byte blocks
  Host io(target, 1, 64);
  ASSERT_EQ(io.connect(1, 63, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);

  // Keyed and in-capsule writes, read back through the target.
  const std::vector<uint8_t> a = pattern(8192, 1), b = pattern(4096, 99);
  ASSERT_EQ(io.run(rw(0x01, 1, 100, 16).keyed(8192), a).status(), kStatusSuccess);
  ASSERT_EQ(io.run(rw(0x01, 1, 8184, 8).in_capsule(4096), b, 4096).status(), kStatusSuccess);  // the last 4 KiB
  EXPECT_EQ(io.run(rw(0x02, 1, 100, 16).keyed(8192)).data, a);
  EXPECT_EQ(io.run(rw(0x02, 1, 8184, 8).keyed(4096)).data, b);
  // Flush: the acknowledged writes are in the file, for any descriptor.
  ASSERT_EQ(io.run(Sqe(0x00, 20).nsid(1)).status(), kStatusSuccess);
  EXPECT_EQ(read_fresh(path_, 100 * 512, 8192), a);
  EXPECT_EQ(read_fresh(path_, 8184 * 512, 4096), b);
  // A write with FUA is durable by itself; Flush of every namespace.
  const std::vector<uint8_t> c = pattern(512, 42);
  ASSERT_EQ(io.run(rw(0x01, 1, 0, 1).cdw(12, 1U << 30).keyed(512), c).status(), kStatusSuccess);
  EXPECT_EQ(read_fresh(path_, 0, 512), c);
  ASSERT_EQ(io.run(Sqe(0x00, 21).nsid(0xFFFFFFFF)).status(), kStatusSuccess);

  // Write Zeroes over blocks 100-103, deallocate 104-107 and 110: zeroes there, the rest kept.
  ASSERT_EQ(io.run(rw(0x08, 1, 100, 4)).status(), kStatusSuccess);
  std::vector<uint8_t> ranges(32, 0);
  put32(ranges, 4, 4);
  put64(ranges, 8, 104);
  put32(ranges, 16 + 4, 1);
  put64(ranges, 16 + 8, 110);
  ASSERT_EQ(io.run(Sqe(0x09, 22).nsid(1).cdw(10, 1).cdw(11, 1U << 2).in_capsule(32), ranges, 32).status(),
            kStatusSuccess);
  const Exchange after = io.run(rw(0x02, 1, 100, 16).keyed(8192));
  ASSERT_EQ(after.data.size(), 8192U);
  EXPECT_TRUE(all_zero(std::span(after.data).first(4096)));
  EXPECT_TRUE(std::equal(after.data.begin() + 4096, after.data.begin() + 5120, a.begin() + 4096));
  EXPECT_TRUE(all_zero(std::span(after.data).subspan(5120, 512)));
  EXPECT_TRUE(std::equal(after.data.begin() + 5632, after.data.end(), a.begin() + 5632));
  ASSERT_EQ(io.run(Sqe(0x00, 23).nsid(1)).status(), kStatusSuccess);
  EXPECT_EQ(read_fresh(path_, 100 * 512, 8192), after.data);
  EXPECT_EQ(target.counters().errors, 0U);
}

TEST_P(FileBackendTest, MoreRequestsThanTheRingHoldsAllComplete) {
  OPEN_OR_SKIP(backend, 1u << 20, 4096, 8);
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<BackendRequest> writes;
  for (uint8_t i = 0; i < 100; ++i) blocks.push_back(pattern(4096, i));
  for (std::size_t i = 0; i < blocks.size(); ++i)
    writes.push_back(request(BackendOp::kWrite, (i * 37 % 256) * 4096, 4096, blocks[i].data()));
  EXPECT_EQ(run_requests(*backend, writes), std::vector<int>(writes.size(), 0));
  std::vector<std::vector<uint8_t>> back(blocks.size(), std::vector<uint8_t>(4096));
  std::vector<BackendRequest> reads;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    reads.push_back(request(BackendOp::kRead, (i * 37 % 256) * 4096, 4096, back[i].data()));
  EXPECT_EQ(run_requests(*backend, reads), std::vector<int>(reads.size(), 0));
  EXPECT_EQ(back, blocks);
}

TEST_P(FileBackendTest, WriteZeroesLargerThanAChunkAndOutsideTheFileIsRefused) {
  OPEN_OR_SKIP(backend, 8u << 20, 512);
  std::vector<uint8_t> ones(8u << 20, 0x11);
  ASSERT_EQ(run_requests(*backend, {request(BackendOp::kWrite, 0, ones.size(), ones.data())}), std::vector<int>{0});
  // 3 MiB + 512 bytes from 512: more than one 1 MiB chunk where zeroes must be written.
  const uint64_t start = 512, length = (3u << 20) + 512;
  EXPECT_EQ(
      run_requests(*backend, {request(BackendOp::kWriteZeroes, start, length),
                              request(BackendOp::kDeallocate, 6u << 20, 1u << 20), request(BackendOp::kFlush, 0, 0)}),
      (std::vector<int>{0, 0, 0}));
  const std::vector<uint8_t> file = read_fresh(path_, 0, 8u << 20);
  ASSERT_EQ(file.size(), 8u << 20);
  EXPECT_EQ(file[511], 0x11);
  EXPECT_TRUE(all_zero(std::span(file).subspan(start, length)));
  EXPECT_EQ(file[start + length], 0x11);
  EXPECT_EQ(file[(6u << 20) - 1], 0x11);
  EXPECT_TRUE(all_zero(std::span(file).subspan(6u << 20, 1u << 20)));
  EXPECT_EQ(file[7u << 20], 0x11);
  EXPECT_EQ(fs::file_size(path_), 8u << 20);  // KEEP_SIZE
  std::vector<uint8_t> block(512);
  EXPECT_EQ(backend->submit(request(BackendOp::kRead, 8u << 20, 512, block.data())), -EINVAL);
  EXPECT_EQ(backend->submit(request(BackendOp::kWrite, UINT64_MAX - 100, 512, block.data())), -EINVAL);
}

INSTANTIATE_TEST_SUITE_P(FileBackend, FileBackendTest,
                         ::testing::Values(Mode{FileIo::kIoUring, "/tmp"}, Mode{FileIo::kWorkerThreads, "/tmp"},
                                           Mode{FileIo::kIoUring, "/dev/shm"},
                                           Mode{FileIo::kWorkerThreads, "/dev/shm"}),
                         mode_name);

TEST(FileBackendOpen, ErrorsNameThePathAndTheProblem) {
  TempDir dir("/tmp");
  ASSERT_FALSE(dir.path().empty());
  auto error_of = [](FileBackendOptions o) {
    auto opened = open_file_backend(o);
    return std::holds_alternative<std::string>(opened) ? std::get<std::string>(opened) : std::string("opened");
  };
  FileBackendOptions o;
  o.path = dir.path() + "/missing.img";
  EXPECT_EQ(error_of(o), o.path + ": does not exist (size_mb creates it)");
  o.path = dir.path();
  EXPECT_EQ(error_of(o), o.path + ": is a directory");
  o.path = "/dev/null";
  EXPECT_EQ(error_of(o), "/dev/null: is neither a file nor a block device");
  o.path = dir.path() + "/odd.img";
  std::ofstream(o.path) << std::string(1000, 'x');
  EXPECT_EQ(error_of(o), o.path + ": 1000 bytes is not a multiple of the block size 512");
  o.path = dir.path() + "/empty.img";
  std::ofstream(o.path).flush();
  EXPECT_EQ(error_of(o), o.path + ": is empty (size_mb gives it a size)");
  o.path = dir.path() + "/no/such/dir.img";
  o.create_size = 1u << 20;
  EXPECT_EQ(error_of(o), o.path + ": cannot open for reading and writing: No such file or directory");
  o.path = dir.path() + "/created.img";
  o.block_size = 1024;
  EXPECT_EQ(error_of(o), o.path + ": the block size is 512 or 4096");
  o.block_size = 4096;
  EXPECT_EQ(error_of(o), "opened");
  EXPECT_EQ(fs::file_size(o.path), 1u << 20);
  o.create_size = 2u << 20;  // extends
  EXPECT_EQ(error_of(o), "opened");
  EXPECT_EQ(fs::file_size(o.path), 2u << 20);
  o.create_size = 0;
  EXPECT_EQ(error_of(o), "opened");
  if (::geteuid() != 0) {  // root reads and writes whatever the mode says
    ::chmod(o.path.c_str(), 0);
    EXPECT_EQ(error_of(o), o.path + ": cannot open for reading and writing: Permission denied");
  }
}

// A block device whose logical blocks are 4 KiB (4Kn) refuses 512-byte write zeroes and deallocates (EINVAL from
// fallocate, which falls back to nothing): a namespace of 512-byte blocks on it is refused when it opens, one of
// 4 KiB blocks opens. A loop device with 4096-byte sectors stands in for the disk (root and loop devices needed).
TEST(FileBackendOpen, ABlockDeviceRefusesABlockSizeBelowItsLogicalBlocks) {
  if (::geteuid() != 0 || ::access("/dev/loop-control", W_OK) != 0) GTEST_SKIP() << "needs root and loop devices";
  TempDir dir("/tmp");
  ASSERT_FALSE(dir.path().empty());
  const std::string image = dir.path() + "/4kn.img";
  std::ofstream(image).flush();
  std::filesystem::resize_file(image, 1u << 20);
  const std::string attach = "losetup --find --show --sector-size 4096 " + image + " 2>/dev/null";
  FILE* pipe = ::popen(attach.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[256] = {};
  const bool attached = std::fgets(line, sizeof line, pipe) != nullptr;
  (void)::pclose(pipe);
  if (!attached) GTEST_SKIP() << "losetup could not attach a loop device with 4096-byte sectors";
  const std::string device = std::string(line).substr(0, std::strcspn(line, "\n"));
  struct Detach {  // whatever the test's outcome
    std::string device;
    ~Detach() { (void)std::system(("losetup --detach " + device).c_str()); }
  } detach{device};
  auto error_of = [&device](uint32_t block_size) {
    FileBackendOptions o;
    o.path = device;
    o.block_size = block_size;
    auto opened = open_file_backend(o);  // a backend opened closes the device again here
    return std::holds_alternative<std::string>(opened) ? std::get<std::string>(opened) : std::string("opened");
  };
  EXPECT_EQ(error_of(512), device + ": the device's logical block size is 4096: block_size must be at least that");
  EXPECT_EQ(error_of(4096), "opened");
}

TEST(FileBackendOpen, TheNvmfSectionTakesFileNamespacesAndNamesItsErrors) {
  TempDir dir("/tmp");
  ASSERT_FALSE(dir.path().empty());
  const std::string file = dir.path() + "/ns2.img";
  auto load = [](const std::string& namespaces) {
    return load_nvmf_config("nvmf:\n  subsystems:\n    - nqn: nqn.2024-01.io.uroce:test\n      namespaces:\n" +
                            namespaces);
  };
  auto errors = [&](const std::string& namespaces) {
    auto loaded = load(namespaces);
    auto* e = std::get_if<std::vector<std::string>>(&loaded);
    return e != nullptr ? *e : std::vector<std::string>{};
  };
  auto loaded = load("        - {nsid: 1, ram_mb: 1}\n        - {nsid: 2, file: " + file +
                     ", size_mb: 3, block_size: 4096, io: threads}\n");
  ASSERT_TRUE(std::holds_alternative<NvmfConfig>(loaded));
  const NamespaceConfig& ns2 = std::get<NvmfConfig>(loaded).target.subsystems[0].namespaces[1];
  EXPECT_EQ(ns2.backend->size(), 3u << 20);
  EXPECT_EQ(ns2.block_size, 4096U);
  EXPECT_NE(ns2.backend->describe().find("worker threads"), std::string::npos);
  EXPECT_EQ(fs::file_size(file), 3u << 20);

  const std::string at = "nvmf.subsystems[0].namespaces[0]";
  EXPECT_EQ(errors("        - {nsid: 1, file: " + dir.path() + "/none.img}\n"),
            std::vector<std::string>{at + ".file: " + dir.path() + "/none.img: does not exist (size_mb creates it)"});
  EXPECT_EQ(
      errors("        - {nsid: 1}\n"),
      std::vector<std::string>{
          at + ": needs one backend: ram_mb (a RAM namespace of that many MiB) or file (a file or block device)"});
  EXPECT_EQ(errors("        - {nsid: 1, ram_mb: 1, file: " + file + "}\n").size(), 1U);
  EXPECT_EQ(errors("        - {nsid: 1, ram_mb: 1, size_mb: 2}\n"),
            std::vector<std::string>{at + ".size_mb: goes with file (it creates or extends it)"});
  EXPECT_EQ(errors("        - {nsid: 1, file: " + file + ", io: aio}\n"),
            std::vector<std::string>{at + ".io: must be auto, io_uring or threads, got 'aio'"});
}

// The transport's limits in the nvmf section: the queue caps and the wait for Fabrics Connect, with their defaults.
TEST(NvmfSection, LimitsTakeTheQueueCapAndTheConnectTimeout) {
  auto load = [](const std::string& limits) {
    return load_nvmf_config("nvmf:\n  limits: {" + limits +
                            "}\n  subsystems:\n    - nqn: nqn.2024-01.io.uroce:test\n      namespaces: [{nsid: 1, "
                            "ram_mb: 1}]\n");
  };
  const auto defaults = load("");
  ASSERT_TRUE(std::holds_alternative<NvmfConfig>(defaults));
  EXPECT_EQ(std::get<NvmfConfig>(defaults).target.limits.max_queues, 256);
  EXPECT_EQ(std::get<NvmfConfig>(defaults).target.limits.max_queues_per_host, 130);
  EXPECT_EQ(std::get<NvmfConfig>(defaults).target.limits.connect_timeout_ms, 10000U);
  const auto set = load("max_queues: 8, max_queues_per_host: 3, connect_timeout_ms: 2500");
  ASSERT_TRUE(std::holds_alternative<NvmfConfig>(set));
  EXPECT_EQ(std::get<NvmfConfig>(set).target.limits.max_queues, 8);
  EXPECT_EQ(std::get<NvmfConfig>(set).target.limits.max_queues_per_host, 3);
  EXPECT_EQ(std::get<NvmfConfig>(set).target.limits.connect_timeout_ms, 2500U);
  const auto zero = load("max_queues: 0, max_queues_per_host: 0, connect_timeout_ms: 50");
  ASSERT_TRUE(std::holds_alternative<std::vector<std::string>>(zero));
  EXPECT_EQ(std::get<std::vector<std::string>>(zero),
            (std::vector<std::string>{"nvmf.limits.max_queues: must be between 1 and 65535, got 0",
                                      "nvmf.limits.max_queues_per_host: must be between 1 and 65535, got 0",
                                      "nvmf.limits.connect_timeout_ms: must be between 100 and 600000, got 50"}));
}

// A backend that completes every request at the next poll() with the result its operation was given (RAM when
// 0), and holds them all while `hold` is set.
class FaultyBackend final : public Backend {
 public:
  FaultyBackend() : ram_(make_ram_backend(1u << 20)) {}
  [[nodiscard]] uint64_t size() const override { return ram_->size(); }
  [[nodiscard]] int submit(const BackendRequest& request) override {
    int result = fail[static_cast<std::size_t>(request.op)];
    if (result == 0) result = ram_->submit(request);
    queued_.push_back({request.context, result});
    return kBackendPending;
  }
  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> out) override {
    std::size_t n = 0;
    while (!hold && n < out.size() && !queued_.empty()) {
      out[n++] = queued_.front();
      queued_.pop_front();
    }
    return n;
  }
  [[nodiscard]] std::string describe() const override { return "faulty RAM"; }

  std::array<int, 5> fail{};  // by BackendOp
  bool hold = false;

 private:
  std::unique_ptr<Backend> ram_;
  std::deque<BackendCompletion> queued_;
};

class BackendFailureTest : public ::testing::Test {
 protected:
  BackendFailureTest() {
    SubsystemConfig sub;
    sub.nqn = kSubsystemNqn;
    sub.namespaces.push_back({.nsid = 1, .block_size = 512, .backend = faulty_});
    TargetConfig config;
    config.subsystems.push_back(sub);
    target_ = std::make_unique<NvmfTarget>(config);
    admin_ = std::make_unique<Host>(*target_, 0);
    cntlid_ = admin_->connect_and_enable(0);
    io_ = std::make_unique<Host>(*target_, 1, 32);
    (void)io_->connect(1, 31, 0, cntlid_, kSubsystemNqn);
  }
  void fail(BackendOp op, int error) { faulty_->fail[static_cast<std::size_t>(op)] = error; }

  std::shared_ptr<FaultyBackend> faulty_ = std::make_shared<FaultyBackend>();
  std::unique_ptr<NvmfTarget> target_;
  std::unique_ptr<Host> admin_;
  uint16_t cntlid_ = 0;
  std::unique_ptr<Host> io_;
};

TEST_F(BackendFailureTest, EachFailureIsAnsweredWithTheStatusTheSpecificationNames) {
  ASSERT_NE(cntlid_, 0);
  ASSERT_TRUE(io_->queue->connected());
  const std::vector<uint8_t> block = pattern(512, 3);
  ASSERT_EQ(io_->run(rw(0x01, 1, 0, 1).keyed(512), block).status(), kStatusSuccess);
  fail(BackendOp::kRead, -EIO);
  EXPECT_EQ(io_->run(rw(0x02, 1, 0, 1).keyed(512)).status(), kUnrecoveredReadError);
  fail(BackendOp::kWrite, -EIO);
  EXPECT_EQ(io_->run(rw(0x01, 1, 0, 1).keyed(512), block).status(), kWriteFault);
  fail(BackendOp::kFlush, -EIO);
  EXPECT_EQ(io_->run(Sqe(0x00, 30).nsid(1)).status(), kWriteFault);
  fail(BackendOp::kWriteZeroes, -ENOSPC);
  EXPECT_EQ(io_->run(rw(0x08, 1, 0, 1)).status(), kCapacityExceeded);
  fail(BackendOp::kDeallocate, -EINVAL);
  std::vector<uint8_t> range(16, 0);
  put32(range, 4, 1);
  EXPECT_EQ(io_->run(Sqe(0x09, 31).nsid(1).cdw(11, 1U << 2).in_capsule(16), range, 16).status(), kInternal);
  // A failed read moved no data to the host.
  fail(BackendOp::kRead, -EIO);
  EXPECT_EQ(io_->run(rw(0x02, 1, 0, 1).keyed(512)).result.data_length, 0U);
  fail(BackendOp::kRead, 0);
  EXPECT_EQ(io_->run(rw(0x02, 1, 0, 1).keyed(512)).data, block);
  // Six media errors in the SMART log, six errors counted.
  const Exchange smart = admin_->run(get_log_page(0x02, 512));
  EXPECT_EQ(get64(smart.data, 160), 6U);
  EXPECT_EQ(target_->counters().errors, 6U);
}

TEST_F(BackendFailureTest, CommandsCompleteOnlyThroughPollAndAQueueMayCloseFirst) {
  ASSERT_TRUE(io_->queue->connected());
  faulty_->hold = true;
  std::vector<uint8_t> data(512);
  const Sqe read = rw(0x02, 1, 0, 1).keyed(512);
  ASSERT_EQ(io_->queue->plan(read.bytes, 0).status, kStatusSuccess);
  const CommandResult pending = io_->queue->execute(read.bytes, data, 1000, 77);
  EXPECT_TRUE(pending.pending);
  EXPECT_EQ(io_->queue->in_flight(), 1U);
  EXPECT_EQ(target_->poll(), 0U);
  std::array<CompletedCommand, 4> done;
  EXPECT_EQ(io_->queue->reap(done), 0U);
  faulty_->hold = false;
  EXPECT_EQ(target_->poll(), 1U);
  ASSERT_EQ(io_->queue->reap(done), 1U);
  EXPECT_EQ(done[0].tag, 77U);
  EXPECT_EQ(done[0].result.status, kStatusSuccess);
  EXPECT_EQ(done[0].result.data_length, 512U);
  EXPECT_EQ(io_->queue->in_flight(), 0U);
  // The queue goes while its command runs: the completion goes nowhere, and nothing breaks.
  faulty_->hold = true;
  ASSERT_EQ(io_->queue->plan(read.bytes, 0).status, kStatusSuccess);
  EXPECT_TRUE(io_->queue->execute(read.bytes, data, 1000, 78).pending);
  io_.reset();
  faulty_->hold = false;
  EXPECT_EQ(target_->poll(), 1U);
}

}  // namespace
}  // namespace uroce::nvmf::testing
