// Scenarios of the NVMe core as the Linux host drives it (drivers/nvme/host/{core,fabrics,rdma}.c; the order is in
// ../shared/ref/cm-nvmf-dcqcn.md §2.5), nvme-cli's discovery (libnvme's chunked log reads), controllers' lives
// (keep-alive expiry, shutdown, the admin queue closing), and the helpers the transport shares.
#include <gtest/gtest.h>

#include <cerrno>
#include <numeric>

#include "apps/nvmf/nvme/tests/nvme_host.h"

namespace uroce::nvmf::testing {
namespace {

class NvmfTargetTest : public ::testing::Test {
 protected:
  NvmfTarget target{test_config()};
};

TEST_F(NvmfTargetTest, LinuxHostAdminSequenceThenIo) {
  Host admin(target, 0, 32);
  // 2. Fabrics Connect on the admin queue: a dynamic controller ID.
  const Exchange connect = admin.connect(0, 31, 5000, 0xFFFF, kSubsystemNqn);
  ASSERT_EQ(connect.status(), kStatusSuccess);
  const auto cntlid = static_cast<uint16_t>(connect.result.dw0);
  EXPECT_NE(cntlid, 0);
  EXPECT_NE(cntlid, 0xFFFF);
  EXPECT_TRUE(admin.queue->connected());

  // 3. nvme_enable_ctrl: CAP (8 bytes), CC.EN, CSTS until RDY; VS.
  const Exchange cap = admin.run(property_get(0x00, true));
  ASSERT_EQ(cap.status(), kStatusSuccess);
  const uint64_t cap_value = cap.result.dw0 | uint64_t{cap.result.dw1} << 32;
  EXPECT_EQ(cap_value & 0xFFFF, 127U);       // MQES
  EXPECT_EQ((cap_value >> 24) & 0xFF, 15U);  // TO
  EXPECT_EQ((cap_value >> 37) & 0xFF, 1U);   // CSS: NVM only
  EXPECT_EQ((cap_value >> 48) & 0xFF, 0U);   // MPSMIN, MPSMAX
  const Exchange csts_before = admin.run(property_get(0x1C, false));
  EXPECT_EQ(csts_before.result.dw0 & 1, 0U);
  EXPECT_EQ(admin.run(property_set(0x14, 0x00460001)).status(), kStatusSuccess);
  EXPECT_EQ(admin.run(property_get(0x14, false)).result.dw0, 0x00460001U);
  EXPECT_EQ(admin.run(property_get(0x1C, false)).result.dw0, 1U);  // RDY
  EXPECT_EQ(admin.run(property_get(0x08, false)).result.dw0, 0x00010300U);

  // 4. Identify Controller.
  const Exchange id = admin.run(identify(0x01));
  ASSERT_EQ(id.status(), kStatusSuccess);
  ASSERT_EQ(id.data.size(), 4096U);
  const std::span<const uint8_t> c(id.data);
  EXPECT_EQ(text(c, 4, 20), "SN42                ");
  EXPECT_EQ(text(c, 24, 40), "uroce NVMe-oF target                    ");
  EXPECT_EQ(text(c, 64, 8), "0.1.0   ");
  EXPECT_EQ(c[77], 5);  // MDTS
  EXPECT_EQ(get16(c, 78), cntlid);
  EXPECT_EQ(get32(c, 80), 0x00010300U);
  EXPECT_EQ(c[111], 1);          // I/O controller
  EXPECT_EQ(c[259], 3);          // AERL
  EXPECT_EQ(get16(c, 320), 10);  // KAS: 1 s
  EXPECT_EQ(c[512], 0x66);
  EXPECT_EQ(c[513], 0x44);
  EXPECT_EQ(get16(c, 514), 128);   // MAXCMD
  EXPECT_EQ(get32(c, 516), 3U);    // NN: the largest NSID
  EXPECT_EQ(get16(c, 520), 0x0C);  // ONCS: DSM, Write Zeroes
  EXPECT_EQ(c[525], 1);            // VWC
  EXPECT_EQ(get32(c, 536), 0x00100005U);
  EXPECT_EQ(text(c, 768, std::strlen(kSubsystemNqn)), kSubsystemNqn);
  EXPECT_EQ(c[768 + std::strlen(kSubsystemNqn)], 0);
  EXPECT_EQ(get32(c, 1792), 260U);  // IOCCSZ
  EXPECT_EQ(get32(c, 1796), 1U);    // IORCSZ
  EXPECT_EQ(get16(c, 1800), 0);     // ICDOFF
  EXPECT_EQ(c[1803], 1);            // MSDBD
  // Identify CNS 06h for the NVM command set (CSI 0), which Linux asks next: the limits of one deallocate.
  const Exchange nvm = admin.run(identify(0x06));
  ASSERT_EQ(nvm.status(), kStatusSuccess);
  EXPECT_EQ(nvm.data[3], 0);              // DMRL: as many ranges as NR allows
  EXPECT_EQ(get32(nvm.data, 4), 65536U);  // DMRSL
  EXPECT_EQ(get64(nvm.data, 8), 65536U);  // DMSL

  // 5. Number of Queues: 4 asked, 4 granted (0's based both halves).
  const Exchange nq = admin.run(set_features(0x07, 3 | 3 << 16));
  EXPECT_EQ(nq.status(), kStatusSuccess);
  EXPECT_EQ(nq.result.dw0, 3U | 3U << 16);
  // 6. AER: held, no answer.
  const Exchange aer = admin.run(Sqe(0x0C, 0x1F));
  EXPECT_EQ(aer.status(), kStatusSuccess);
  EXPECT_TRUE(aer.result.held);
  // 7. Keep Alive.
  EXPECT_EQ(admin.run(Sqe(0x18, 9)).status(), kStatusSuccess);
  // 8. SMART / Health.
  const Exchange smart = admin.run(get_log_page(0x02, 512));
  ASSERT_EQ(smart.status(), kStatusSuccess);
  ASSERT_EQ(smart.data.size(), 512U);
  EXPECT_EQ(get16(smart.data, 1), 313);
  EXPECT_EQ(smart.data[3], 100);

  // 9. I/O queues 1 and 2 join the controller.
  Host io1(target, 1, 128), io2(target, 2, 128);
  const Exchange c1 = io1.connect(1, 127, 0, cntlid, kSubsystemNqn);
  ASSERT_EQ(c1.status(), kStatusSuccess);
  EXPECT_EQ(c1.result.dw0, cntlid);
  ASSERT_EQ(io2.connect(2, 127, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);

  // 10. Namespace scan: active list, namespace, descriptors.
  const Exchange list = admin.run(identify(0x02, 0));
  ASSERT_EQ(list.status(), kStatusSuccess);
  EXPECT_EQ(get32(list.data, 0), 1U);
  EXPECT_EQ(get32(list.data, 4), 3U);
  EXPECT_EQ(get32(list.data, 8), 0U);
  EXPECT_EQ(get32(admin.run(identify(0x02, 1)).data, 0), 3U);  // above NSID 1
  const Exchange ns1 = admin.run(identify(0x00, 1));
  ASSERT_EQ(ns1.status(), kStatusSuccess);
  EXPECT_EQ(get64(ns1.data, 0), 2048U);  // NSZE: 1 MiB of 512-byte blocks
  EXPECT_EQ(get64(ns1.data, 8), 2048U);
  EXPECT_EQ(get64(ns1.data, 16), 2048U);
  EXPECT_EQ(ns1.data[25], 0);   // NLBAF
  EXPECT_EQ(ns1.data[26], 0);   // FLBAS
  EXPECT_EQ(ns1.data[130], 9);  // LBAF0.DS
  EXPECT_EQ(admin.run(identify(0x00, 3)).data[130], 12);
  const Exchange desc = admin.run(identify(0x03, 1));
  ASSERT_EQ(desc.status(), kStatusSuccess);
  EXPECT_EQ(desc.data[0], 2);  // NGUID
  EXPECT_EQ(desc.data[1], 16);
  EXPECT_TRUE(std::equal(desc.data.begin() + 4, desc.data.begin() + 20, ns1.data.begin() + 104));
  EXPECT_EQ(desc.data[20], 3);  // UUID
  EXPECT_EQ(desc.data[21], 16);
  EXPECT_EQ(desc.data[24 + 6] >> 4, 8);  // version 8
  EXPECT_EQ(desc.data[40], 0);           // the end of the list

  // Write in the capsule on queue 1 and by keyed SGL on queue 2, read back through the other.
  std::vector<uint8_t> pattern(4096);
  std::iota(pattern.begin(), pattern.end(), uint8_t{7});
  const Exchange w1 = io1.run(rw(0x01, 1, 8, 8).in_capsule(4096), pattern, 4096);
  ASSERT_EQ(w1.status(), kStatusSuccess);
  EXPECT_EQ(w1.plan.sgl.kind, SglKind::kInCapsule);
  const Exchange r2 = io2.run(rw(0x02, 1, 8, 8).keyed(4096));
  ASSERT_EQ(r2.status(), kStatusSuccess);
  EXPECT_EQ(r2.plan.direction, DataDirection::kControllerToHost);
  EXPECT_TRUE(r2.plan.sgl.invalidate);
  EXPECT_EQ(r2.data, pattern);
  std::vector<uint8_t> block(4096, 0x5A);
  ASSERT_EQ(io2.run(rw(0x01, 3, 63, 1).keyed(4096, 0x99, false), block).status(), kStatusSuccess);  // the last block
  EXPECT_EQ(io1.run(rw(0x02, 3, 63, 1).keyed(4096)).data, block);
  EXPECT_EQ(io1.run(Sqe(0x00, 10).nsid(1)).status(), kStatusSuccess);  // Flush

  // Write Zeroes, then Dataset Management deallocate; both read back as zeroes.
  EXPECT_EQ(io1.run(rw(0x08, 1, 8, 4)).status(), kStatusSuccess);
  const Exchange half = io1.run(rw(0x02, 1, 8, 8).keyed(4096));
  EXPECT_TRUE(std::all_of(half.data.begin(), half.data.begin() + 2048, [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::equal(half.data.begin() + 2048, half.data.end(), pattern.begin() + 2048));
  std::vector<uint8_t> ranges(32, 0);
  put32(ranges, 4, 4);   // NLB
  put64(ranges, 8, 12);  // SLBA
  put32(ranges, 16 + 4, 1);
  put64(ranges, 16 + 8, 63);
  const Exchange dsm = io1.run(Sqe(0x09, 11).nsid(1).cdw(10, 1).cdw(11, 1U << 2).in_capsule(32), ranges, 32);
  ASSERT_EQ(dsm.status(), kStatusSuccess);
  const Exchange zeroes = io2.run(rw(0x02, 1, 8, 8).keyed(4096));
  EXPECT_TRUE(std::all_of(zeroes.data.begin(), zeroes.data.end(), [](uint8_t b) { return b == 0; }));

  // The SMART log counted the I/O.
  const Exchange smart_after = admin.run(get_log_page(0x02, 512));
  EXPECT_EQ(get64(smart_after.data, 80), 2U);  // host write commands
  EXPECT_EQ(get64(smart_after.data, 64), 4U);  // host read commands
  // Queue teardown answers the held AER.
  EXPECT_EQ(admin.queue->take_held(), std::vector<uint16_t>{0x1F});
  EXPECT_TRUE(admin.queue->take_held().empty());
  EXPECT_EQ(target.counters().errors, 0U);
  EXPECT_EQ(target.counters().controllers_created, 1U);
}

TEST_F(NvmfTargetTest, SqHeadAdvancesPerCommandAndWrapsAtTheConnectedSize) {
  Host admin(target, 0, 4);
  const Exchange c = admin.connect(0, 3, 0, 0xFFFF, kSubsystemNqn);
  ASSERT_EQ(c.status(), kStatusSuccess);
  EXPECT_EQ(c.sq_head, 1);
  EXPECT_EQ(admin.run(property_get(0x08, false)).sq_head, 2);
  EXPECT_EQ(admin.run(Sqe(0x55, 1)).sq_head, 3);  // a refused command is consumed too
  EXPECT_EQ(admin.run(property_get(0x08, false)).sq_head, 0);
  EXPECT_EQ(admin.run(property_get(0x08, false)).sq_head, 1);
}

TEST_F(NvmfTargetTest, ConnectSqsizeMayNotExceedWhatTheTransportPosted) {
  Host admin(target, 0, 16);
  const Exchange c = admin.connect(0, 31, 0, 0xFFFF, kSubsystemNqn);
  EXPECT_EQ(c.status(), kConnectInvalidParameters);
  EXPECT_EQ(c.result.dw0, 44U);  // IPO: SQSIZE
}

TEST_F(NvmfTargetTest, DiscoveryControllerAndItsLogInLibnvmeChunks) {
  Host disc(target, 0, 32);
  const Exchange c = disc.connect(0, 31, 0, 0xFFFF, kDiscoveryNqn);
  ASSERT_EQ(c.status(), kStatusSuccess);
  ASSERT_EQ(disc.run(property_set(0x14, 0x00000001)).status(), kStatusSuccess);  // IOSQES/IOCQES 0 is fine here
  EXPECT_EQ(disc.run(property_get(0x1C, false)).result.dw0, 1U);

  const Exchange id = disc.run(identify(0x01));
  ASSERT_EQ(id.status(), kStatusSuccess);
  EXPECT_EQ(id.data[111], 2);  // discovery controller
  EXPECT_EQ(get16(id.data, 78), c.result.dw0);
  EXPECT_EQ(text(id.data, 768, std::strlen(kDiscoveryNqn)), kDiscoveryNqn);
  EXPECT_EQ(id.data[261] & 4, 4);  // LPA: extended data (LPO)
  EXPECT_EQ(get32(id.data, 536), 0x00100005U);
  EXPECT_EQ(disc.run(identify(0x06)).status(), kInvalidField);  // no I/O command set here

  // libnvme: the header (RAE) at LPO 0 ...
  const Exchange header = disc.run(get_log_page(0x70, 1024, 0, 0));
  ASSERT_EQ(header.status(), kStatusSuccess);
  const uint64_t genctr = get64(header.data, 0);
  const uint64_t numrec = get64(header.data, 8);
  EXPECT_EQ(numrec, 2U);  // two ports; the restricted subsystem is not this host's
  EXPECT_EQ(get16(header.data, 16), 0);
  // ... then the entries from LPO 1024 in pieces of at most 4096 bytes (here 1024, to exercise the offsets) ...
  std::vector<uint8_t> entries;
  for (uint64_t offset = 1024; offset < 1024 * (1 + numrec); offset += 1024) {
    const Exchange piece = disc.run(get_log_page(0x70, 1024, offset, 0));
    ASSERT_EQ(piece.status(), kStatusSuccess);
    entries.insert(entries.end(), piece.data.begin(), piece.data.end());
  }
  // ... and the header again, whose GENCTR has not moved.
  EXPECT_EQ(get64(disc.run(get_log_page(0x70, 1024, 0, 0)).data, 0), genctr);

  const std::span<const uint8_t> e0(entries.data(), 1024), e1(entries.data() + 1024, 1024);
  EXPECT_EQ(e0[0], 1);  // RDMA
  EXPECT_EQ(e0[1], 1);  // IPv4
  EXPECT_EQ(e0[2], 2);  // NVM subsystem
  EXPECT_EQ(e0[3], 0);  // TREQ
  EXPECT_EQ(get16(e0, 4), 0);
  EXPECT_EQ(get16(e0, 6), 0xFFFF);
  EXPECT_EQ(get16(e0, 8), 32);
  EXPECT_EQ(text(e0, 32, 32), "4420" + std::string(28, ' '));
  EXPECT_EQ(text(e0, 256, std::strlen(kSubsystemNqn) + 1), std::string(kSubsystemNqn) + '\0');
  EXPECT_EQ(text(e0, 512, 12), "198.18.0.100");
  EXPECT_EQ(e0[512 + 12], ' ');
  EXPECT_EQ(e0[768], 1);  // QPTYPE connected
  EXPECT_EQ(e0[769], 1);  // PRTYPE not specified
  EXPECT_EQ(e0[770], 1);  // CMS RDMA_CM
  EXPECT_EQ(e1[1], 2);    // IPv6
  EXPECT_EQ(get16(e1, 4), 1);
  EXPECT_EQ(text(e1, 32, 4), "4421");

  // One 4096-byte read from LPO 0 sees the same bytes, zeroes past the log's end.
  const Exchange whole = disc.run(get_log_page(0x70, 4096, 0, 0));
  ASSERT_EQ(whole.status(), kStatusSuccess);
  EXPECT_TRUE(std::equal(entries.begin(), entries.end(), whole.data.begin() + 1024));
  EXPECT_TRUE(std::all_of(whole.data.begin() + 3072, whole.data.end(), [](uint8_t b) { return b == 0; }));
  // An unaligned window straddling two records.
  const Exchange straddle = disc.run(get_log_page(0x70, 8, 1020, 0));
  EXPECT_TRUE(std::equal(straddle.data.begin(), straddle.data.end(), whole.data.begin() + 1020));

  // What nvmet's discovery controller takes, and what it does not.
  EXPECT_EQ(disc.run(set_features(0x0F, 30000)).status(), kStatusSuccess);
  EXPECT_EQ(disc.run(get_features(0x0F)).result.dw0, 30000U);
  EXPECT_EQ(disc.run(set_features(0x0B, 1U << 31)).status(), kStatusSuccess);
  EXPECT_EQ(disc.run(Sqe(0x18, 20)).status(), kStatusSuccess);
  EXPECT_TRUE(disc.run(Sqe(0x0C, 21)).result.held);
  EXPECT_EQ(disc.run(identify(0x00, 1)).status(), kInvalidField);
  EXPECT_EQ(disc.run(get_log_page(0x02, 512)).status(), kInvalidField);
  EXPECT_EQ(disc.run(set_features(0x07, 0)).status(), kInvalidField);
  EXPECT_EQ(disc.run(Sqe(0x08, 22)).status(), kInvalidOpcode);  // Abort
  EXPECT_EQ(disc.run(Sqe(0x10, 23)).status(), kInvalidOpcode);  // Firmware Commit

  // No I/O queue joins a discovery controller.
  Host io(target, 1);
  EXPECT_EQ(io.connect(1, 31, 0, static_cast<uint16_t>(c.result.dw0), kDiscoveryNqn).status(),
            kConnectInvalidParameters);
}

TEST_F(NvmfTargetTest, TheAllowedHostSeesTheRestrictedSubsystemInDiscovery) {
  Host disc(target, 0);
  const std::vector<uint8_t> data = connect_data(0xFFFF, kDiscoveryNqn, kOtherHostNqn);
  ASSERT_EQ(disc.run(connect_sqe(0, 31, 0), data).status(), kStatusSuccess);
  ASSERT_EQ(disc.run(property_set(0x14, 1)).status(), kStatusSuccess);
  const Exchange header = disc.run(get_log_page(0x70, 4096 + 1024, 0, 0));
  ASSERT_EQ(header.status(), kStatusSuccess);
  EXPECT_EQ(get64(header.data, 8), 4U);
  EXPECT_EQ(text(header.data, 2048 + 256, std::strlen(kRestrictedNqn)), kRestrictedNqn);
}

TEST_F(NvmfTargetTest, KeepAliveExpiryTearsTheControllerDown) {
  Host admin(target, 0);
  admin.now = 10000;
  const uint16_t cntlid = admin.connect_and_enable(5000);
  ASSERT_NE(cntlid, 0);
  Host io(target, 1);
  io.now = 10000;
  ASSERT_EQ(io.connect(1, 31, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);

  // Keep Alive at 14 s, I/O traffic at 22 s: the controller lives.
  admin.now = 14000;
  ASSERT_EQ(admin.run(Sqe(0x18, 1)).status(), kStatusSuccess);
  target.tick(20000);
  io.now = 22000;
  ASSERT_EQ(io.run(Sqe(0x00, 1).nsid(1)).status(), kStatusSuccess);
  target.tick(31000);
  EXPECT_FALSE(admin.queue->dead());
  EXPECT_EQ(target.counters().keep_alive_expired, 0U);

  // Silent for KATO plus the grace (another KATO): gone, and both queues say so.
  target.tick(32001);
  EXPECT_TRUE(admin.queue->dead());
  EXPECT_TRUE(io.queue->dead());
  EXPECT_EQ(target.counters().keep_alive_expired, 1U);
  EXPECT_EQ(target.counters().controllers_destroyed, 1U);
  EXPECT_EQ(io.run(rw(0x02, 1, 0, 1).keyed(512)).status(), 0x0008);  // aborted: SQ deletion
  // The controller ID no longer admits I/O queues.
  Host late(target, 2);
  EXPECT_EQ(late.connect(2, 31, 0, cntlid, kSubsystemNqn).status(), kConnectInvalidParameters);
}

TEST_F(NvmfTargetTest, TrafficWithoutKeepAliveCountsAsLifeAndKatoZeroNeverExpires) {
  Host admin(target, 0);
  admin.connect_and_enable(1000);
  for (uint64_t t = 1000; t < 20000; t += 700) {
    admin.now = t;
    (void)admin.queue->plan(property_get(0x08, false).bytes, 0);  // planned, not yet executed: still traffic
    target.tick(t + 300);
  }
  EXPECT_FALSE(admin.queue->dead());

  Host quiet(target, 0);
  quiet.connect_and_enable(0);
  target.tick(1000000000);
  EXPECT_FALSE(quiet.queue->dead());
  EXPECT_TRUE(admin.queue->dead());
}

// Any host may open a discovery controller, and each holds a queue: one whose host asks for no keep-alive, in its
// Connect or later through Set Features, gets nvmet's two minutes anyway, so that a host that goes away without a
// word frees it. (A Set Features KATO of 0 used to switch the discovery controller's keep-alive off for good.)
TEST_F(NvmfTargetTest, ADiscoveryControllerKeepsAKeepAliveWhateverItsHostAsks) {
  Host disc(target, 0);
  disc.now = 1000;
  ASSERT_EQ(disc.connect(0, 31, 60000, 0xFFFF, kDiscoveryNqn).status(), kStatusSuccess);
  ASSERT_EQ(disc.run(property_set(0x14, 1)).status(), kStatusSuccess);
  ASSERT_EQ(disc.run(set_features(0x0F, 0)).status(), kStatusSuccess);
  EXPECT_EQ(disc.run(get_features(0x0F)).result.dw0, 120000U);
  target.tick(1000 + 2 * 120000);
  EXPECT_FALSE(disc.queue->dead());
  target.tick(1000 + 2 * 120000 + 1);
  EXPECT_TRUE(disc.queue->dead()) << "a silent discovery host's controller goes";
}

TEST_F(NvmfTargetTest, ShutdownCompletesAndTheControllerStaysReadable) {
  Host admin(target, 0);
  const uint16_t cntlid = admin.connect_and_enable(0);
  Host io(target, 1);
  ASSERT_EQ(io.connect(1, 31, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);
  ASSERT_EQ(admin.run(property_set(0x14, 0x00464001)).status(), kStatusSuccess);  // SHN = 01b
  const uint32_t csts = admin.run(property_get(0x1C, false)).result.dw0;
  EXPECT_EQ(csts & 0xC, 0x8U);  // SHST complete
  EXPECT_EQ(csts & 1, 0U);      // not ready
  EXPECT_FALSE(admin.queue->dead());
  EXPECT_EQ(io.run(rw(0x02, 1, 0, 1).keyed(512)).status(), kCommandSequenceError);
}

TEST_F(NvmfTargetTest, ClosingTheAdminQueueEndsTheControllerAndFreesItOnceItsQueuesGo) {
  auto admin = std::make_unique<Host>(target, 0);
  const uint16_t cntlid = admin->connect_and_enable(0);
  Host io(target, 1);
  ASSERT_EQ(io.connect(1, 31, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);
  admin.reset();
  EXPECT_TRUE(io.queue->dead());
  EXPECT_EQ(target.counters().controllers_destroyed, 1U);
  io.queue.reset();  // the last reference: freed (ASan would see a use after free otherwise)
  Host again(target, 0);
  EXPECT_NE(again.connect_and_enable(0), 0);
}

TEST_F(NvmfTargetTest, FabricsDisconnectEndsOnlyThatIoQueue) {
  Host admin(target, 0);
  const uint16_t cntlid = admin.connect_and_enable(0);
  Host io(target, 1);
  ASSERT_EQ(io.connect(1, 31, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);
  Sqe disconnect(0x7F, 3);
  disconnect.bytes[4] = 0x08;
  EXPECT_EQ(io.run(disconnect).status(), kStatusSuccess);
  EXPECT_TRUE(io.queue->dead());
  EXPECT_FALSE(admin.queue->dead());
  Host again(target, 1);
  EXPECT_EQ(again.connect(1, 31, 0, cntlid, kSubsystemNqn).status(), kStatusSuccess);  // qid 1 is free again
}

TEST_F(NvmfTargetTest, NamespaceIdentifiersAreDerivedFromTheNqnAndNsid) {
  NvmfTarget other(test_config());
  auto nguid = [](NvmfTarget& t, uint32_t nsid) {
    Host admin(t, 0);
    admin.connect_and_enable(0);
    const Exchange ns = admin.run(identify(0x00, nsid));
    return std::vector<uint8_t>(ns.data.begin() + 104, ns.data.begin() + 120);
  };
  EXPECT_EQ(nguid(target, 1), nguid(other, 1));
  EXPECT_NE(nguid(target, 1), nguid(target, 3));
  EXPECT_NE(nguid(target, 1), std::vector<uint8_t>(16, 0));
}

TEST(NvmfHelpers, CqeLayout) {
  CommandResult result;
  result.status = 0x4002;
  result.dw0 = 0x11223344;
  result.dw1 = 0x55667788;
  const auto cqe = make_cqe(result, 0x0102, 0x0304, 0xBEEF);
  EXPECT_EQ(get32(cqe, 0), 0x11223344U);
  EXPECT_EQ(get32(cqe, 4), 0x55667788U);
  EXPECT_EQ(get16(cqe, 8), 0x0102);
  EXPECT_EQ(get16(cqe, 10), 0x0304);
  EXPECT_EQ(get16(cqe, 12), 0xBEEF);
  EXPECT_EQ(get16(cqe, 14), 0x8004);  // (status << 1) | phase 0: DNR is bit 15
}

TEST(NvmfHelpers, ParseSglAndCommandId) {
  const Sqe keyed = Sqe(0x02, 0xABCD).keyed(0x123456, 0xCAFEF00D, true, 0x1122334455667788);
  EXPECT_EQ(command_id(keyed.bytes), 0xABCD);
  const Sgl k = parse_sgl(std::span<const uint8_t, 16>(keyed.bytes.data() + 24, 16));
  EXPECT_EQ(k.kind, SglKind::kKeyed);
  EXPECT_EQ(k.address, 0x1122334455667788U);
  EXPECT_EQ(k.length, 0x123456U);
  EXPECT_EQ(k.key, 0xCAFEF00DU);
  EXPECT_TRUE(k.invalidate);
  const Sqe null = Sqe(0x18, 1);
  EXPECT_EQ(parse_sgl(std::span<const uint8_t, 16>(null.bytes.data() + 24, 16)).kind, SglKind::kNone);
  const Sqe inline_data = Sqe(0x01, 1).in_capsule(512);
  const Sgl i = parse_sgl(std::span<const uint8_t, 16>(inline_data.bytes.data() + 24, 16));
  EXPECT_EQ(i.kind, SglKind::kInCapsule);
  EXPECT_EQ(i.length, 512U);
  EXPECT_FALSE(i.invalidate);
}

TEST(NvmfHelpers, RamBackendStaysInsideAndCompletesWithinSubmit) {
  auto ram = make_ram_backend(8192);
  std::vector<uint8_t> buf(4096, 1);
  auto request = [&](BackendOp op, uint64_t offset, uint64_t length) {
    BackendRequest r;
    r.op = op;
    r.offset = offset;
    r.length = length;
    r.data = buf.data();
    return ram->submit(r);
  };
  EXPECT_EQ(request(BackendOp::kWrite, 4096, 4096), 0);
  EXPECT_EQ(request(BackendOp::kWrite, 4097, 4096), -EINVAL);
  EXPECT_EQ(request(BackendOp::kRead, UINT64_MAX - 10, 4096), -EINVAL);
  EXPECT_EQ(request(BackendOp::kWriteZeroes, 8192, 1), -EINVAL);
  EXPECT_EQ(request(BackendOp::kWriteZeroes, 8192, 0), 0);
  std::fill(buf.begin(), buf.end(), 0);
  EXPECT_EQ(request(BackendOp::kRead, 4096, 4096), 0);
  EXPECT_EQ(buf[4095], 1);
  EXPECT_EQ(request(BackendOp::kDeallocate, 4096, 512), 0);
  EXPECT_EQ(request(BackendOp::kRead, 4096, 4096), 0);
  EXPECT_EQ(buf[511], 0);
  EXPECT_EQ(buf[512], 1);
  EXPECT_EQ(request(BackendOp::kFlush, 0, 0), 0);
  std::array<BackendCompletion, 4> completions;
  EXPECT_EQ(ram->poll(completions), 0U);
}

// Deallocate and Write Zeroes hand whole pages back to the kernel and clear the partial pages at either end by hand:
// every byte in the range reads as zero afterwards, every byte outside keeps its data, and a page handed back takes
// writes again.
TEST(NvmfHelpers, RamBackendZeroesPartialAndWholePages) {
  constexpr std::size_t kSize = 4 * 4096;
  auto ram = make_ram_backend(kSize);
  auto request = [&](BackendOp op, uint64_t offset, std::vector<uint8_t>& data) {
    BackendRequest r;
    r.op = op;
    r.offset = offset;
    r.length = data.size();
    r.data = data.data();
    return ram->submit(r);
  };
  std::vector<uint8_t> all(kSize, 0xAB);
  ASSERT_EQ(request(BackendOp::kWrite, 0, all), 0);
  // From the middle of page 0 to the middle of page 3: pages 1 and 2 whole.
  std::vector<uint8_t> range(3 * 4096);
  ASSERT_EQ(request(BackendOp::kDeallocate, 2048, range), 0);
  ASSERT_EQ(request(BackendOp::kRead, 0, all), 0);
  for (std::size_t i = 0; i < kSize; ++i) {
    const bool inside = i >= 2048 && i < 2048 + range.size();
    ASSERT_EQ(all[i], inside ? 0 : 0xAB) << "byte " << i;
  }
  std::vector<uint8_t> page(4096, 0xCD);
  ASSERT_EQ(request(BackendOp::kWrite, 4096, page), 0);
  std::fill(page.begin(), page.end(), 0);
  ASSERT_EQ(request(BackendOp::kRead, 4096, page), 0);
  EXPECT_EQ(page, std::vector<uint8_t>(4096, 0xCD));
  // Within one page, and Write Zeroes of whole pages.
  std::vector<uint8_t> small(512);
  ASSERT_EQ(request(BackendOp::kWriteZeroes, 4096 + 512, small), 0);
  std::vector<uint8_t> whole(kSize);
  ASSERT_EQ(request(BackendOp::kWriteZeroes, 0, whole), 0);
  ASSERT_EQ(request(BackendOp::kRead, 0, all), 0);
  EXPECT_EQ(all, std::vector<uint8_t>(kSize, 0));
}

TEST(NvmfConfig, ValidateNamesTheFirstProblem) {
  EXPECT_FALSE(NvmfTarget::validate(test_config()));
  auto with = [](auto change) {
    TargetConfig config = test_config();
    change(config);
    return NvmfTarget::validate(config).value_or("");
  };
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[0].nqn = "test"; }).find("subsystems[0].nqn"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[1].nqn = c.subsystems[0].nqn; }).find("twice"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[0].nqn = kDiscoveryNqn; }).find("discovery"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[0].serial = std::string(21, 'x'); }).find("serial"),
            std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[0].namespaces[1].nsid = 1; }).find("namespaces[1].nsid"),
            std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[0].namespaces[0].block_size = 1024; }).find("block_size"),
            std::string::npos);
  EXPECT_NE(
      with([](TargetConfig& c) { c.subsystems[0].namespaces[0].backend = make_ram_backend(1000); }).find("multiple"),
      std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.subsystems[0].namespaces[0].backend.reset(); }).find("no backend"),
            std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.ports[0].port = 0; }).find("ports[0].port"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.limits.mdts = 0; }).find("mdts"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.limits.inline_data_size = 100; }).find("inline"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.limits.max_queues = 0; }).find("max_queues"), std::string::npos);
  EXPECT_NE(with([](TargetConfig& c) { c.limits.connect_timeout_ms = 0; }).find("connect_timeout_ms"),
            std::string::npos);
}

}  // namespace
}  // namespace uroce::nvmf::testing
