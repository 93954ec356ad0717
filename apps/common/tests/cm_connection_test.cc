// The tools' connection helpers (cm_connection.h) through the CM, end to end over the loopback engines.
#include "apps/common/cm_connection.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "api/tests/connection_fixture.h"

namespace uroce::ndk::testing {
namespace {

using CmConnection = ConnectionTest;

// accept_qp's completion context lives in its own frame. A peer that sends the REQ and never the RTU keeps the accept
// pending past any timeout (the REP is retransmitted for as long as the peer's REQ asks, up to 180 s), so a timed-out
// accept_qp must cancel it by closing the connector before it returns: the cancellation's completion then runs
// while the frame still exists, not later over another function's stack.
TEST_F(CmConnection, AnAcceptThatTimesOutClosesItsConnectorFirst) {
  Player& a = player({.engine = 0});
  Player& b = player({.engine = 1});
  std::string error;
  const std::unique_ptr<apps::CmListener> listener = apps::CmListener::listen(adapter(), ipv4(b, kPort).storage, error);
  ASSERT_NE(listener, nullptr) << error;
  Connector* active = connector();
  Completion replied;
  ASSERT_EQ(connect(active, a, b, kPort, "", replied), STATUS_PENDING);
  Connector* incoming = listener->next(apps::CmClock::now() + std::chrono::seconds(10));
  ASSERT_NE(incoming, nullptr);
  const uint32_t connectors = adapter().UroceQueryResources().Connectors;  // the active and the incoming one

  apps::CmConnectParams params;
  params.timeout = std::chrono::milliseconds(200);
  EXPECT_EQ(apps::accept_qp(*incoming, *b.qp, params), STATUS_IO_TIMEOUT) << "the active side never completes";
  EXPECT_EQ(adapter().UroceQueryResources().Connectors, connectors - 1) << "the incoming connector is closed";
  close(active);
}

}  // namespace
}  // namespace uroce::ndk::testing
