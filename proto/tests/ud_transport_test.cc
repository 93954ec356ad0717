// The UD transport over bytes: DETH with Q_Key and source QP, the 40-byte network
// header area in front of the payload, and every drop rule.
#include <gtest/gtest.h>

#include <deque>
#include <vector>

#include "proto/packet_parser.h"
#include "proto/ud_qp.h"

namespace uroce::proto {
namespace {

class UdTestEnv final : public UdEnv {
 public:
  uint8_t* tx_begin(std::size_t length) override {
    frames.emplace_back(length);
    return frames.back().data();
  }
  void tx_commit(std::size_t) override {}
  uint8_t* resolve_local(LocalToken t, uint64_t addr, uint32_t, uint32_t) override {
    return t.value() == 7 ? reinterpret_cast<uint8_t*>(addr) : nullptr;
  }
  const RecvWqe* pop_receive() override {
    if (rq.empty()) return nullptr;
    popped = rq.front();
    rq.pop_front();
    return &popped;
  }
  void complete_send(const Completion& c) override { sends.push_back(c); }
  void complete_receive(const Completion& c, Qpn source) override {
    receives.push_back(c);
    sources.push_back(source);
  }
  std::vector<std::vector<uint8_t>> frames;
  std::deque<RecvWqe> rq;
  RecvWqe popped{};
  std::vector<Completion> sends, receives;
  std::vector<Qpn> sources;
};

UdAddress address_of(Qpn dest, QKey qkey, bool ipv6) {
  PacketSpec s;
  s.src_mac = MacAddr{0x020000000001};
  s.dst_mac = MacAddr{0x020000000002};
  if (ipv6) {
    s.src_gid = Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    s.dst_gid = Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  } else {
    s.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120001});
    s.dst_gid = gid_from_ipv4(Ipv4Addr{0xC6120002});
  }
  s.dest_qp = dest;
  UdAddress a;
  a.headers.init(s);
  a.remote_qpn = dest;
  a.remote_qkey = qkey;
  return a;
}

SendWqe datagram(std::vector<uint8_t>& data, WorkOp op = WorkOp::kSend) {
  SendWqe w;
  w.op = op;
  w.flags = kWqeSignaled;
  w.context = 42;
  w.num_sge = 1;
  w.length = static_cast<uint32_t>(data.size());
  w.sge[0] = {reinterpret_cast<uint64_t>(data.data()), w.length, LocalToken{7}};
  w.immediate = 0xFEED;
  return w;
}

TEST(UdTransport, DatagramArrivesBehindItsNetworkHeader) {
  for (bool ipv6 : {false, true}) {
    UdTestEnv sender, receiver;
    UdQp a(Qpn{0x20}, QKey{0x1234}, 1024, &sender);
    UdQp b(Qpn{0x30}, QKey{0x1234}, 1024, &receiver);
    std::vector<uint8_t> data(1021);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 3);
    std::vector<uint8_t> buffer(2000, 0xEE);
    receiver.rq.push_back(RecvWqe{9, 1, {Sge{reinterpret_cast<uint64_t>(buffer.data()), 2000, LocalToken{7}}}});
    ASSERT_EQ(a.send(datagram(data, WorkOp::kSendWithImmediate), address_of(Qpn{0x30}, QKey{0x1234}, ipv6)),
              CompletionStatus::kSuccess);
    ASSERT_EQ(sender.frames.size(), 1u);
    ASSERT_EQ(sender.sends.size(), 1u);
    const ParseResult r = parse_packet(sender.frames[0]);
    ASSERT_TRUE(r.ok()) << parse_error_name(r.error);
    EXPECT_EQ(r.packet.opcode(), Opcode::kUdSendOnlyWithImmediate);
    b.on_packet(r.packet);
    ASSERT_EQ(receiver.receives.size(), 1u);
    EXPECT_EQ(receiver.receives[0].byte_length, kUdGrhSize + 1021);
    EXPECT_EQ(receiver.receives[0].immediate, 0xFEEDu);
    EXPECT_EQ(receiver.sources[0], Qpn{0x20});
    EXPECT_EQ(std::memcmp(buffer.data() + kUdGrhSize, data.data(), data.size()), 0);
    // The network header sits in the last 20 (IPv4) or all 40 (IPv6) bytes of the GRH area.
    const uint8_t* l3 = sender.frames[0].data() + 14;
    if (ipv6) {
      EXPECT_EQ(std::memcmp(buffer.data(), l3, 40), 0);
    } else {
      EXPECT_EQ(std::memcmp(buffer.data() + 20, l3, 20), 0);
    }
  }
}

TEST(UdTransport, DropsAndErrors) {
  UdTestEnv sender, receiver;
  UdQp a(Qpn{0x20}, QKey{0x1234}, 1024, &sender);
  UdQp b(Qpn{0x30}, QKey{0x1234}, 1024, &receiver);
  std::vector<uint8_t> data(100, 1), big(1025, 1);
  EXPECT_EQ(a.send(datagram(big), address_of(Qpn{0x30}, QKey{0x1234}, false)), CompletionStatus::kLocalLengthError)
      << "a UD message is one packet";
  SendWqe bad_key = datagram(data);
  bad_key.sge[0].lkey = LocalToken{8};
  EXPECT_EQ(a.send(bad_key, address_of(Qpn{0x30}, QKey{0x1234}, false)), CompletionStatus::kLocalProtectionError);
  EXPECT_TRUE(sender.frames.empty());

  // Wrong Q_Key: dropped. No receive posted: dropped (UD has no RNR).
  ASSERT_EQ(a.send(datagram(data), address_of(Qpn{0x30}, QKey{0x9999}, false)), CompletionStatus::kSuccess);
  ASSERT_EQ(a.send(datagram(data), address_of(Qpn{0x30}, QKey{0x1234}, false)), CompletionStatus::kSuccess);
  for (const auto& f : sender.frames) {
    const ParseResult r = parse_packet(f);
    ASSERT_TRUE(r.ok());
    b.on_packet(r.packet);
  }
  EXPECT_EQ(b.counters().rx_qkey_mismatch, 1u);
  EXPECT_EQ(b.counters().rx_no_receive, 1u);
  EXPECT_TRUE(receiver.receives.empty());

  // A buffer without room for the header area and the payload completes in error.
  std::vector<uint8_t> small(100);
  receiver.rq.push_back(RecvWqe{1, 1, {Sge{reinterpret_cast<uint64_t>(small.data()), 100, LocalToken{7}}}});
  const ParseResult r = parse_packet(sender.frames.back());
  b.on_packet(r.packet);
  ASSERT_EQ(receiver.receives.size(), 1u);
  EXPECT_EQ(receiver.receives[0].status, CompletionStatus::kLocalLengthError);
}

TEST(UdTransport, ControlledQKeyUsesTheQpsOwn) {
  UdTestEnv sender;
  UdQp gsi(kGsiQpn, kGsiQKey, 256, &sender);
  std::vector<uint8_t> mad(256, 0);
  ASSERT_EQ(gsi.send(datagram(mad), address_of(kGsiQpn, QKey{0x80000000}, false)), CompletionStatus::kSuccess);
  const ParseResult r = parse_packet(sender.frames[0]);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.packet.ext<Deth>(ExtHeader::kDeth).get(Deth::qkey), kGsiQKey);
  EXPECT_EQ(r.packet.ext<Deth>(ExtHeader::kDeth).get(Deth::src_qp), kGsiQpn);
  EXPECT_EQ(r.packet.length(), 322u) << "a CM MAD frame over IPv4 (rocev2.md §8.3)";
}

}  // namespace
}  // namespace uroce::proto
