// uroce-perf: perftest's bandwidth and latency tests (write_bw, read_bw, send_bw, write_lat, read_lat, send_lat)
// on uroce, built on the public API (api/ndk.h) only.
//
// It speaks perftest's exchange (perftest_exchange.h), over TCP or, with -R, over a connection of its own made
// through the connection manager (perftest_rdma_cm.h), so real ib_write_bw, ib_read_bw, ib_send_bw and the
// ib_*_lat tools can sit on the other end in either role: like perftest, it is the server when no host is given
// and the client otherwise. Both roles run the test the way perftest's do (perf_role.h) and print perftest's table.
// The options are perftest's (perf_options.h).
//
// --in-process runs both roles here, each on its own engine and port of the configuration (the client on the
// first, the server on the last; the embedded default joins its two ports with an in-process ring link), with
// the same exchange over TCP on the loopback interface (or through the CM between the two ports, with -R). That
// is the README's main job, and every received byte is checked.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/common/peer_shutdown.h"
#include "apps/common/tool_setup.h"
#include "apps/perf/perf_options.h"
#include "apps/perf/perf_role.h"
#include "apps/perf/perftest_exchange.h"
#include "apps/perf/perftest_rdma_cm.h"
#include "config/config.h"

using namespace uroce;
using namespace uroce::ndk;
using namespace uroce::apps;
using namespace uroce::apps::perf;

namespace {

// The address a side announces: -x picks among the port's addresses.
std::optional<config::IpAddress> address_of(const config::PortConfig& port, const Options& o) {
  const uint32_t index = o.gid_index.value_or(0);
  if (index >= port.addresses.size()) {
    complain("-x %u: port '%s' has %zu address(es), so GID indexes 0..%zu", index, port.name.c_str(),
             port.addresses.size(), port.addresses.size() - 1);
    return std::nullopt;
  }
  return port.addresses[index];
}

// The exchange's connection: perftest's client retries nothing, so without --timeout give the server a moment.
std::unique_ptr<ExchangeTransport> connect_exchange(const Options& o, Adapter& adapter, const config::IpAddress& ip,
                                                    const std::optional<sockaddr_storage>& cm_server,
                                                    const std::string& host, std::string& error) {
  const auto patience = std::chrono::seconds(o.timeout ? o.timeout : 2);
  if (cm_server) return RdmaCmExchange::connect(adapter, to_sockaddr(ip), *cm_server, patience, error);
  std::optional<TcpStream> stream = TcpStream::connect(host, o.tcp_port, Clock::now() + patience, error);
  if (!stream) return nullptr;
  return std::make_unique<TcpExchange>(std::move(*stream));
}

// The server's end: a TCP listening socket on `bind_address`, or (with -R) the CM listener `cm_listener`, which
// also takes the test QPs' requests. `listening` runs once clients can connect.
std::unique_ptr<ExchangeTransport> accept_exchange(const Options& o, Adapter& adapter, CmListener* cm_listener,
                                                   const std::string& bind_address,
                                                   const std::function<void()>& listening, std::string& error) {
  const Clock::time_point deadline =
      o.timeout ? Clock::now() + std::chrono::seconds(o.timeout) : Clock::time_point::max();
  if (cm_listener != nullptr) {
    listening();
    return RdmaCmExchange::accept(adapter, *cm_listener, deadline, std::chrono::seconds(o.timeout ? o.timeout : 60),
                                  error);
  }
  std::optional<TcpStream> stream = TcpStream::accept_one(bind_address, o.tcp_port, deadline, listening, error);
  if (!stream) return nullptr;
  return std::make_unique<TcpExchange>(std::move(*stream));
}

// -R: the server's CM address, the exchange's port on `ip`.
sockaddr_storage cm_address(const config::IpAddress& ip, const Options& o) {
  sockaddr_storage a = to_sockaddr(ip);
  if (a.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = htons(o.tcp_port);
  } else {
    reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(o.tcp_port);
  }
  return a;
}

// Both roles here, on the first and the last port, with perftest's exchange over TCP on the loopback interface
// (or, with -R, through the CM between the two ports).
int run_in_process(const Options& o, const config::Config& cfg, Adapter* adapter) {
  const std::optional<config::IpAddress> client_ip = address_of(cfg.ports.front(), o);
  const std::optional<config::IpAddress> server_ip = address_of(cfg.ports.back(), o);
  if (!client_ip || !server_ip) return 2;
  const Clock::duration timeout = std::chrono::seconds(o.timeout);
  std::string error;
  std::unique_ptr<CmListener> listener;
  std::optional<sockaddr_storage> cm_server;
  if (o.rdma_cm) {
    cm_server = cm_address(*server_ip, o);
    if (!(listener = CmListener::listen(*adapter, *cm_server, error))) return complain("%s", error.c_str()), 1;
  }
  // The server's table would repeat the client's: it goes nowhere; its errors still reach stderr.
  FILE* quiet = std::fopen("/dev/null", "w");
  if (!quiet) return complain("cannot open /dev/null"), 1;
  const uint16_t last_engine = static_cast<uint16_t>(adapter->UroceEngineCount() - 1);
  std::atomic<bool> listening = false, server_ok = false;
  std::thread server([&] {
    std::string server_error;
    std::unique_ptr<ExchangeTransport> exchange = accept_exchange(
        o, *adapter, listener.get(), "127.0.0.1", [&] { listening = true; }, server_error);
    listening = true;  // also on failure, so that the client stops waiting
    if (!exchange) return (void)complain("(server) %s", server_error.c_str());
    PerftestSession session(std::move(exchange), false, timeout);
    Role role(o, Side{adapter, *server_ip, cfg.ports.back().device, false, last_engine, quiet, {}, listener.get()},
              session);
    server_ok = role.run();
  });
  while (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool client_ok = false;
  if (std::unique_ptr<ExchangeTransport> exchange =
          connect_exchange(o, *adapter, *client_ip, cm_server, "127.0.0.1", error)) {
    PerftestSession session(std::move(exchange), true, timeout);
    Role role(o, Side{adapter, *client_ip, cfg.ports.front().device, true, uint16_t{0}, stdout, cm_server, nullptr},
              session);
    client_ok = role.run();
  } else {
    complain("%s", error.c_str());
  }
  server.join();
  listener.reset();  // after every connector it handed out has closed
  std::fclose(quiet);
  return client_ok && server_ok ? 0 : 1;
}

int run_remote(const Options& o, const config::Config& cfg, std::size_t port, Adapter* adapter) {
  const std::optional<config::IpAddress> ip = address_of(cfg.ports[port], o);
  if (!ip) return 2;
  std::string error;
  std::unique_ptr<CmListener> listener;
  std::optional<sockaddr_storage> cm_server;
  if (o.rdma_cm && o.client()) {
    cm_server = parse_socket_address(*o.host, o.tcp_port);
    if (!cm_server) return complain("-R: the server is named by its address, not '%s'", o.host->c_str()), 2;
  } else if (o.rdma_cm) {
    // Every address of the port's family, as perftest's server binds INADDR_ANY.
    config::IpAddress any;
    any.is_v6 = ip->is_v6;
    if (!(listener = CmListener::listen(*adapter, cm_address(any, o), error))) return complain("%s", error.c_str()), 1;
  }
  std::unique_ptr<ExchangeTransport> exchange =
      o.client() ? connect_exchange(o, *adapter, *ip, cm_server, *o.host, error)
                 : accept_exchange(
                       o, *adapter, listener.get(), "",
                       [] {
                         std::printf(
                             "\n************************************\n* Waiting for client to connect... *\n"
                             "************************************\n");
                         std::fflush(stdout);
                       },
                       error);
  if (!exchange) return complain("%s", error.c_str()), 1;
  auto session = std::make_unique<PerftestSession>(std::move(exchange), o.client(), std::chrono::seconds(o.timeout));
  bool ran = false;
  {
    Role role(o,
              Side{adapter, *ip, cfg.ports[port].device, o.client(), std::nullopt, stdout, cm_server, listener.get()},
              *session);
    ran = role.run();
  }  // the QPs and their resources are closed here
  // Over -R the exchange is an RDMA connection: it ends while the engines still poll (its DREQ must go out), and
  // before the listener that handed it out (whose close waits for it). Over TCP the stream stays open for
  // stop_polling_with_peer().
  if (o.rdma_cm) session.reset();
  listener.reset();
  stop_polling_with_peer(*adapter, session ? session->transport().stream() : nullptr);
  return ran ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<ConfigOptions> config_options = take_config_options(argc, argv, kTool);
  if (!config_options) return 2;
  const std::optional<Options> options = parse(argc, argv);
  if (!options) {
    std::fprintf(stderr, "usage: uroce-perf MODE [options] [HOST]; see --help\n");
    return 2;
  }
  const Options& o = *options;
  if (o.help) {
    usage(stdout);
    return 0;
  }
  // A remote peer is reached through one port; the in-process mode joins the first and the last.
  const std::optional<ToolConfig> tool = load_tool_config(*config_options, !o.in_process, kTool);
  if (!tool) return 2;
  config::Config cfg = tool->config;
  if (o.rdma_cm) {
    // The CM gives the QPs their attributes from the configuration: -m and -u go there (without -R they go into
    // each QP's UroceConnect).
    if (o.mtu) cfg.rdma.path_mtu = static_cast<uint16_t>(o.mtu);
    cfg.rdma.ack_timeout = o.qp_timeout;
  }
  if (o.in_process && (cfg.ports.size() < 2 || cfg.ports.back().addresses.empty()))
    return complain("--in-process needs two ports with addresses (the client uses the first, the server the last)"), 2;
  Options run_options = o;  // the MTU offered to the peer: -m, else the configuration's
  if (!run_options.mtu) run_options.mtu = cfg.rdma.path_mtu;
  Adapter* adapter = nullptr;
  if (!ok(NdkOpenAdapter(cfg, kNdkVersion, &adapter), "NdkOpenAdapter")) return 1;
  const int status =
      o.in_process ? run_in_process(run_options, cfg, adapter) : run_remote(run_options, cfg, tool->port, adapter);
  NdkCloseAdapter(adapter);
  return status;
}
