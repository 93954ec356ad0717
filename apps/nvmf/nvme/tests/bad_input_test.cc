// Bad input (issue #11): each answered with the status the specification names (and nvmet gives), counted, with no
// data moved and no byte touched outside a namespace.
#include <gtest/gtest.h>

#include "apps/nvmf/nvme/tests/nvme_host.h"

namespace uroce::nvmf::testing {
namespace {

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cntlid_ = admin_.connect_and_enable(5000);
    ASSERT_NE(cntlid_, 0);
    ASSERT_EQ(admin_.run(set_features(0x07, 1 | 1 << 16)).status(), kStatusSuccess);  // two I/O queues
    ASSERT_EQ(io_.connect(1, 127, 0, cntlid_, kSubsystemNqn).status(), kStatusSuccess);
  }
  // A refused command: the status, nothing to move.
  static void expect_refused(const Exchange& x, NvmeStatus status) {
    EXPECT_EQ(x.status(), status);
    EXPECT_EQ(x.plan.status, status);  // refused in plan(), before any byte moves
    EXPECT_EQ(x.plan.length, 0U);
    EXPECT_EQ(x.plan.direction, DataDirection::kNone);
  }

  NvmfTarget target_{test_config()};
  Host admin_{target_, 0, 32};
  Host io_{target_, 1, 128};
  uint16_t cntlid_ = 0;
};

TEST_F(BadInputTest, InvalidOpcode) {
  expect_refused(admin_.run(Sqe(0xC1, 1)), kInvalidOpcode);       // vendor specific
  expect_refused(admin_.run(Sqe(0x01, 1)), kInvalidOpcode);       // Create I/O SQ: not on fabrics
  expect_refused(io_.run(Sqe(0x0D, 1).nsid(1)), kInvalidOpcode);  // Reservation Register
  expect_refused(io_.run(Sqe(0x06, 1).nsid(1)), kInvalidOpcode);  // an admin opcode on an I/O queue
  Sqe fabrics(0x7F, 1);
  fabrics.bytes[4] = 0x05;  // Authentication Send: not configured
  expect_refused(admin_.run(fabrics), kInvalidOpcode);
  expect_refused(io_.run(property_get(0x08, false)), kInvalidOpcode);  // properties live on the admin queue
  EXPECT_EQ(target_.counters().invalid_opcode, 6U);
}

TEST_F(BadInputTest, InvalidField) {
  expect_refused(admin_.run(identify(0x10)), kInvalidField);                   // CNS not supported
  expect_refused(admin_.run(get_log_page(0x05, 4096)), kInvalidField);         // LID not supported
  expect_refused(admin_.run(get_log_page(0x70, 4096)), kInvalidField);         // discovery log on an NVM ctrl
  expect_refused(admin_.run(get_log_page(0x02, 512, 514)), kInvalidField);     // LPO not dword aligned
  expect_refused(admin_.run(get_log_page(0x02, 512, 1024)), kInvalidField);    // LPO past the log
  EXPECT_EQ(admin_.run(set_features(0x06, 0)).status(), kInvalidField);        // VWC stays on
  EXPECT_EQ(admin_.run(set_features(0x07, 0xFFFF)).status(), kInvalidField);   // NSQR 65536
  EXPECT_EQ(admin_.run(set_features(0x0B, 1U << 8)).status(), kInvalidField);  // AEC bit not supported
  EXPECT_EQ(admin_.run(set_features(0x80, 0)).status(), kInvalidField);
  EXPECT_EQ(admin_.run(get_features(0x01)).status(), kInvalidField);
  EXPECT_EQ(admin_.run(property_get(0x20, false)).status(), kInvalidField);  // NSSR
  EXPECT_EQ(admin_.run(property_get(0x14, true)).status(), kInvalidField);   // CC is 4 bytes
  EXPECT_EQ(admin_.run(property_set(0x1C, 0)).status(), kInvalidField);      // CSTS is read-only
  Sqe fused = Sqe(0x02, 1).nsid(1).keyed(512);
  fused.bytes[1] |= 0x01;
  expect_refused(io_.run(fused), kInvalidField);
  Sqe prp = Sqe(0x02, 1).nsid(1).keyed(512);
  prp.bytes[1] = 0x00;  // PSDT 00b: PRPs
  expect_refused(io_.run(prp), kInvalidField);
  // More than MDTS (128 KiB): 256 blocks of 512 bytes is fine, 33 of 4096 is not.
  EXPECT_EQ(io_.run(rw(0x02, 1, 0, 256).keyed(256 * 512)).status(), kStatusSuccess);
  expect_refused(io_.run(rw(0x02, 3, 0, 33).keyed(33 * 4096)), kInvalidField);
  expect_refused(admin_.run(get_log_page(0x01, 256 * 1024)), kInvalidField);
  EXPECT_EQ(admin_.run(identify(0x06).cdw(11, 2U << 24)).status(), kInvalidField);  // CSI 2: zoned, not ours
  EXPECT_EQ(target_.counters().invalid_field, 18U);
}

TEST_F(BadInputTest, InvalidNamespace) {
  expect_refused(io_.run(rw(0x02, 2, 0, 1).keyed(512)), kInvalidNamespace);
  expect_refused(io_.run(rw(0x01, 0, 0, 1).keyed(512)), kInvalidNamespace);
  expect_refused(io_.run(rw(0x02, 0xFFFFFFFF, 0, 1).keyed(512)), kInvalidNamespace);
  EXPECT_EQ(admin_.run(identify(0x03, 2)).status(), kInvalidNamespace);
  EXPECT_EQ(admin_.run(identify(0x00, 0xFFFFFFFF)).status(), kInvalidNamespace);
  EXPECT_EQ(admin_.run(identify(0x02, 0xFFFFFFFE)).status(), kInvalidNamespace);
  // An inactive NSID below NN reads as zeroes (nvmet).
  const Exchange inactive = admin_.run(identify(0x00, 2));
  EXPECT_EQ(inactive.status(), kStatusSuccess);
  EXPECT_TRUE(std::all_of(inactive.data.begin(), inactive.data.end(), [](uint8_t b) { return b == 0; }));
}

TEST_F(BadInputTest, LbaOutOfRange) {
  // Namespace 1: 2048 blocks of 512 bytes.
  EXPECT_EQ(io_.run(rw(0x02, 1, 2047, 1).keyed(512)).status(), kStatusSuccess);
  expect_refused(io_.run(rw(0x02, 1, 2047, 2).keyed(1024)), kLbaOutOfRange);
  expect_refused(io_.run(rw(0x01, 1, 2048, 1).keyed(512)), kLbaOutOfRange);
  expect_refused(io_.run(rw(0x01, 1, UINT64_MAX, 2).keyed(1024)), kLbaOutOfRange);  // SLBA + NLB wraps
  expect_refused(io_.run(rw(0x08, 1, 2000, 49)), kLbaOutOfRange);                   // Write Zeroes
  // Dataset Management: one range past the end refuses the whole command, and nothing is zeroed.
  std::vector<uint8_t> block(512, 0x77);
  ASSERT_EQ(io_.run(rw(0x01, 1, 0, 1).keyed(512), block).status(), kStatusSuccess);
  std::vector<uint8_t> ranges(32, 0);
  put32(ranges, 4, 1);
  put64(ranges, 8, 0);
  put32(ranges, 16 + 4, 2);
  put64(ranges, 16 + 8, 2047);
  const Exchange dsm = io_.run(Sqe(0x09, 2).nsid(1).cdw(10, 1).cdw(11, 4).keyed(32), ranges);
  EXPECT_EQ(dsm.status(), kLbaOutOfRange);
  EXPECT_EQ(io_.run(rw(0x02, 1, 0, 1).keyed(512)).data, block);
  EXPECT_EQ(target_.counters().lba_out_of_range, 5U);
}

// Dataset Management deallocate: ranges may overlap, so each range inside the namespace bounds nothing; the blocks
// all ranges name together may not exceed DMSL (65536, Identify CNS 06h). 33 ranges over the whole namespace (2048
// blocks each) are refused with Command Size Limit Exceeded and zero nothing; 32 are within the limit.
TEST_F(BadInputTest, DatasetManagementPastTheSizeLimit) {
  std::vector<uint8_t> block(512, 0x77);
  ASSERT_EQ(io_.run(rw(0x01, 1, 100, 1).keyed(512), block).status(), kStatusSuccess);
  auto deallocate_whole_namespace = [&](uint32_t times) {
    std::vector<uint8_t> ranges(std::size_t{16} * times, 0);
    for (std::size_t i = 0; i < times; ++i) put32(ranges, 16 * i + 4, 2048);  // NLB, from SLBA 0
    return io_.run(Sqe(0x09, 2).nsid(1).cdw(10, times - 1).cdw(11, 4).keyed(16 * times), ranges);
  };
  const uint64_t errors = target_.counters().errors;
  EXPECT_EQ(deallocate_whole_namespace(33).status(), kCommandSizeLimitExceeded);
  EXPECT_EQ(target_.counters().errors, errors + 1);
  EXPECT_EQ(io_.run(rw(0x02, 1, 100, 1).keyed(512)).data, block);
  EXPECT_EQ(deallocate_whole_namespace(32).status(), kStatusSuccess);
  EXPECT_EQ(io_.run(rw(0x02, 1, 100, 1).keyed(512)).data, std::vector<uint8_t>(512, 0));
}

TEST_F(BadInputTest, ConnectInvalidParametersNamesTheField) {
  Host a(target_, 0);
  Exchange x = a.connect(0, 0, 0, 0xFFFF, kSubsystemNqn);
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 44U);                    // IATTR 0, IPO SQSIZE
  x = a.connect(0, 40, 0, 0xFFFF, kSubsystemNqn);  // the admin queue holds 32
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 44U);
  x = a.connect(0, 31, 0, 7, kSubsystemNqn);  // an admin Connect asks for a dynamic controller
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 0x10010U);               // IATTR 1, IPO cntlid
  x = a.connect(3, 31, 0, 0xFFFF, kSubsystemNqn);  // not the qid of the CM connection
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 42U);
  Sqe recfmt = connect_sqe(0, 31, 0);
  recfmt.bytes[40] = 1;
  EXPECT_EQ(a.run(recfmt, connect_data(0xFFFF, kSubsystemNqn, kHostNqn)).status(), kConnectIncompatibleFormat);
  Host big(target_, 2, 256);
  x = big.connect(2, 255, 0, cntlid_, kSubsystemNqn);  // past MQES
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 44U);
  EXPECT_FALSE(a.queue->connected());
  EXPECT_EQ(target_.counters().connect_rejected, 6U);
}

TEST_F(BadInputTest, ConnectToAnUnknownNqn) {
  Host a(target_, 0);
  const Exchange x = a.connect(0, 31, 0, 0xFFFF, "nqn.2024-01.io.uroce:nobody");
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 0x10100U);  // IATTR 1, IPO subnqn
  // An NQN that fills its field without a NUL is cut at 255 bytes, not read past.
  std::vector<uint8_t> data = connect_data(0xFFFF, "", kHostNqn);
  std::fill(data.begin() + 256, data.begin() + 512, 'n');
  EXPECT_EQ(a.run(connect_sqe(0, 31, 0), data).result.dw0, 0x10100U);
}

TEST_F(BadInputTest, ConnectByAHostNotAllowed) {
  Host a(target_, 0);
  const Exchange x = a.connect(0, 31, 0, 0xFFFF, kRestrictedNqn);
  EXPECT_EQ(x.status(), kConnectInvalidHost);
  EXPECT_EQ(x.result.dw0, 0x10200U);  // IATTR 1, IPO hostnqn
  Host b(target_, 0);
  EXPECT_EQ(b.connect(0, 31, 0, 0xFFFF, kRestrictedNqn, kOtherHostNqn).status(), kStatusSuccess);
}

TEST_F(BadInputTest, IoConnectWithAWrongControllerHostOrQid) {
  Host a(target_, 2);
  Exchange x = a.connect(2, 31, 0, static_cast<uint16_t>(cntlid_ + 1), kSubsystemNqn);
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 0x10010U);
  x = a.connect(2, 31, 0, cntlid_, kSubsystemNqn, kOtherHostNqn);  // someone else's controller
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 0x10010U);
  x = a.connect(2, 31, 0, cntlid_, kRestrictedNqn);  // another subsystem
  EXPECT_EQ(x.status(), kConnectInvalidHost);
  Host beyond(target_, 3);
  x = beyond.connect(3, 31, 0, cntlid_, kSubsystemNqn);  // Number of Queues granted two
  EXPECT_EQ(x.status(), kConnectInvalidParameters);
  EXPECT_EQ(x.result.dw0, 42U);
  Host twice(target_, 1);
  EXPECT_EQ(twice.connect(1, 31, 0, cntlid_, kSubsystemNqn).status(), kCommandSequenceError);  // qid 1 is taken
  EXPECT_EQ(a.connect(2, 31, 0, cntlid_, kSubsystemNqn).status(), kStatusSuccess);
}

TEST_F(BadInputTest, SglTypesNotAdvertised) {
  expect_refused(io_.run(rw(0x02, 1, 0, 1).keyed(512).sgl_type(0x20)), kSglTypeInvalid);  // segment
  expect_refused(io_.run(rw(0x02, 1, 0, 1).keyed(512).sgl_type(0x30)), kSglTypeInvalid);  // last segment
  expect_refused(io_.run(rw(0x02, 1, 0, 1).keyed(512).sgl_type(0x10)), kSglTypeInvalid);  // bit bucket
  expect_refused(io_.run(rw(0x02, 1, 0, 1).keyed(512).sgl_type(0x5A)), kSglTypeInvalid);  // transport data block
  expect_refused(io_.run(rw(0x02, 1, 0, 1).keyed(512).sgl_type(0x41)), kInvalidField);    // keyed, offset subtype
  expect_refused(io_.run(rw(0x01, 1, 0, 1).keyed(512).sgl_type(0x00)), kInvalidField);    // data block, address
  expect_refused(admin_.run(identify(0x01).in_capsule(0)), kSglTypeInvalid);  // no in-capsule data on admin queues
}

TEST_F(BadInputTest, InCapsuleDataRules) {
  const std::vector<uint8_t> data(8192, 1);
  expect_refused(io_.run(rw(0x01, 1, 0, 16).in_capsule(8192), data, 4096), kSglOffsetInvalid);     // longer than sent
  expect_refused(io_.run(rw(0x01, 1, 0, 1).in_capsule(512, 512), data, 4096), kSglOffsetInvalid);  // ICDOFF is 0
  expect_refused(io_.run(rw(0x01, 1, 0, 1).in_capsule(512, UINT64_MAX - 100), data, 4096),
                 kSglOffsetInvalid);                                                      // offset + length would wrap
  expect_refused(io_.run(rw(0x02, 1, 0, 1).in_capsule(512), data, 4096), kInvalidField);  // a read in the capsule
  EXPECT_EQ(io_.run(rw(0x01, 1, 0, 8).in_capsule(4096), data, 4096).status(), kStatusSuccess);
}

TEST_F(BadInputTest, SglShorterThanTheData) {
  expect_refused(io_.run(rw(0x02, 1, 0, 2).keyed(512)), kSglDataLengthInvalid);
  expect_refused(io_.run(rw(0x01, 1, 0, 2).in_capsule(512), std::vector<uint8_t>(512), 4096), kSglDataLengthInvalid);
  expect_refused(admin_.run(identify(0x01).null_sgl()), kSglDataLengthInvalid);
  // Longer is fine: the plan moves only what the command needs.
  const Exchange x = io_.run(rw(0x02, 1, 0, 1).keyed(4096));
  EXPECT_EQ(x.status(), kStatusSuccess);
  EXPECT_EQ(x.plan.length, 512U);
}

TEST_F(BadInputTest, CommandsBeforeConnectAndBeforeEnable) {
  Host fresh(target_, 0);
  expect_refused(fresh.run(identify(0x01)), kCommandSequenceError);
  expect_refused(fresh.run(property_get(0x00, true)), kCommandSequenceError);
  Host fresh_io(target_, 2);
  expect_refused(fresh_io.run(rw(0x02, 1, 0, 1).keyed(512)), kCommandSequenceError);
  // Connected, not enabled: properties work, nothing else.
  const Exchange connected = fresh.connect(0, 31, 0, 0xFFFF, kSubsystemNqn);
  ASSERT_EQ(connected.status(), kStatusSuccess);
  EXPECT_EQ(fresh.run(property_get(0x00, true)).status(), kStatusSuccess);
  expect_refused(fresh.run(identify(0x01)), kCommandSequenceError);
  // A second Connect on a connected queue.
  EXPECT_EQ(fresh.connect(0, 31, 0, 0xFFFF, kSubsystemNqn).status(), kCommandSequenceError);
  // I/O queues join an enabled controller only (SPDK's rule).
  Host early(target_, 1);
  const Exchange x = early.connect(1, 31, 0, static_cast<uint16_t>(connected.result.dw0), kSubsystemNqn);
  EXPECT_EQ(x.status(), kCommandSequenceError);
  // A controller that enables with the wrong entry sizes fails (CSTS.CFS) and stays unready.
  Host bad(target_, 0);
  ASSERT_EQ(bad.connect(0, 31, 0, 0xFFFF, kSubsystemNqn).status(), kStatusSuccess);
  ASSERT_EQ(bad.run(property_set(0x14, 0x00550001)).status(), kStatusSuccess);
  EXPECT_EQ(bad.run(property_get(0x1C, false)).result.dw0, 2U);
}

TEST_F(BadInputTest, AsyncEventLimitAndKeepAliveWithoutKato) {
  for (uint16_t cid = 0; cid < 4; ++cid) EXPECT_TRUE(admin_.run(Sqe(0x0C, cid)).result.held);
  EXPECT_EQ(admin_.run(Sqe(0x0C, 4)).status(), kAsyncLimit);
  EXPECT_EQ(admin_.queue->take_held().size(), 4U);
  Host no_kato(target_, 0);
  no_kato.connect_and_enable(0);
  EXPECT_EQ(no_kato.run(Sqe(0x18, 1)).status(), kKeepAliveInvalid);
}

TEST_F(BadInputTest, ExecuteWithLessDataThanPlannedIsRefused) {
  const Sqe read = rw(0x02, 1, 0, 2).keyed(1024);
  const CommandPlan plan = io_.queue->plan(read.bytes, 0);
  ASSERT_EQ(plan.length, 1024U);
  std::vector<uint8_t> small(1000);
  EXPECT_EQ(io_.queue->execute(read.bytes, small, 0).status, kInternal);
}

}  // namespace
}  // namespace uroce::nvmf::testing
