#include "loopback_fixture.h"

#include <thread>

#include <arpa/inet.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#include "dataplane/eal.h"

namespace uroce::dataplane::testing {

config::PortConfig port_config(const std::string& name, const std::string& device) {
  config::PortConfig p;
  p.name = name;
  p.device = device;
  return p;
}

config::IpAddress ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  config::IpAddress ip;
  ip.bytes[0] = a;
  ip.bytes[1] = b;
  ip.bytes[2] = c;
  ip.bytes[3] = d;
  ip.prefix_length = 24;
  return ip;
}

config::IpAddress ipv6(const char* text) {
  config::IpAddress ip;
  ip.is_v6 = true;
  ip.prefix_length = 64;
  EXPECT_EQ(inet_pton(AF_INET6, text, ip.bytes.data()), 1) << text;
  return ip;
}

config::Config loopback_config() {
  config::Config c;
  c.eal.lcores = test_engine_cpus();
  c.eal.hugepages = config::HugePages::kOff;
  c.engine.idle = config::IdlePolicy::kBackoff;
  c.engine.mbufs_per_engine = 4095;
  c.engine.mbuf_cache = 64;
  c.engine.max_qps_per_engine = 256;
  c.engine.redirect_ring_size = 4096;
  config::PortConfig a = port_config("a", "ring:ab");
  a.mac = config::MacAddress{0x02, 0, 0, 0, 0, 0x0a};
  a.addresses = {ipv4(198, 18, 0, 1), ipv6("fd00::1")};
  config::PortConfig b = port_config("b", "ring:ab");
  b.mac = config::MacAddress{0x02, 0, 0, 0, 0, 0x0b};
  b.addresses = {ipv4(198, 18, 0, 2), ipv6("fd00::2")};
  c.ports = {a, b};
  return c;
}

bool eventually(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

proto::PacketSpec roce_spec(const Dataplane& dp, PortIndex from, PortIndex to, proto::Qpn qpn, proto::Opcode opcode,
                            uint32_t psn, std::span<const uint8_t> payload) {
  proto::PacketSpec s;
  s.src_mac = dp.port(from).mac;
  s.dst_mac = dp.port(to).mac;
  s.src_gid = proto::gid_from_ipv4(dp.port(from).ipv4.front());
  s.dst_gid = proto::gid_from_ipv4(dp.port(to).ipv4.front());
  s.opcode = opcode;
  s.dest_qp = qpn;
  s.psn = proto::Psn{psn};
  s.payload = payload;
  return s;
}

FrameGenerator::FrameGenerator(PortIndex port, uint64_t count, MakeFrame make_frame, unsigned per_iteration)
    : port_(port), count_(count), make_frame_(std::move(make_frame)), per_iteration_(per_iteration) {}

bool FrameGenerator::poll(void* self, EngineContext& ctx) {
  auto& g = *static_cast<FrameGenerator*>(self);
  unsigned sent = 0;
  while (sent < g.per_iteration_ && g.next_ < g.count_) {
    rte_mbuf* m = ctx.alloc_mbuf();
    if (m == nullptr) break;  // backpressure: try again next iteration
    const std::size_t length =
        g.make_frame_(g.next_, std::span<uint8_t>(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m)));
    if (g.rx_flags) m->ol_flags |= g.rx_flags(g.next_);
    ++g.next_;
    if (length == 0 || rte_pktmbuf_append(m, static_cast<uint16_t>(length)) == nullptr) {
      rte_pktmbuf_free(m);
      continue;
    }
    ctx.send(g.port_, m);
    ++sent;
  }
  g.sent_.store(g.next_, std::memory_order_release);
  return sent != 0;
}

void run_generator(Engine& engine, FrameGenerator& generator) {
  ASSERT_TRUE(engine.add_poller(generator.poller()).ok());
  EXPECT_TRUE(eventually([&] { return generator.done(); })) << "sent " << generator.sent();
  ASSERT_TRUE(engine.remove_poller(&generator).ok());
}

std::vector<RecordingEndpoint::Packet> RecordingEndpoint::packets() const {
  const std::lock_guard lock(mutex_);
  return packets_;
}

void RecordingEndpoint::on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex port,
                                  rte_mbuf* mbuf) {
  auto& e = *static_cast<RecordingEndpoint*>(self);
  {
    const std::lock_guard lock(e.mutex_);
    e.packets_.push_back(
        Packet{ctx.id(), rte_lcore_id(), packet.opcode(), packet.bth().get(proto::Bth::psn).value(), port});
  }
  rte_pktmbuf_free(mbuf);
  e.count_.fetch_add(1, std::memory_order_release);
}

Dataplane& LoopbackTest::start(const config::Config& config) {
  auto dp = Dataplane::start(config);
  if (!dp.ok()) {
    ADD_FAILURE() << dp.error();
    throw std::runtime_error(dp.error());
  }
  dp_ = std::move(dp.value());
  return *dp_;
}

void LoopbackTest::TearDown() { dp_.reset(); }

uint64_t LoopbackTest::counter(EngineId engine, const std::string& name) const {
  const auto value = counter_value(dp_->engine(engine).counters(), name);
  EXPECT_TRUE(value.has_value()) << "no counter named " << name;
  return value.value_or(0);
}

}  // namespace uroce::dataplane::testing
