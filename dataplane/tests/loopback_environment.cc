// The EAL exists once per process: this Environment starts it before the first test (--no-huge, two engine
// lcores on the first two CPUs, see init_eal_for_tests); the process's exit ends it (see TearDown).
#include <gtest/gtest.h>

#include <rte_eal.h>

#include "dataplane/eal.h"

namespace {

class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const uroce::dataplane::Status s = uroce::dataplane::init_eal_for_tests();
    ASSERT_TRUE(s.ok()) << s.message();
  }
  // No rte_eal_cleanup(), as in uroce's tools: in DPDK 22.11 a closed net_memif server port leaves its listener's
  // interrupt source registered (memif_socket_remove_device frees it without unregistering it), and
  // rte_eal_cleanup() unmaps the memory that source lives in while the interrupt thread still walks it: a SIGSEGV
  // in rte_intr_fd_get at exit, in about half the runs of a binary with a memif test. The process's exit releases
  // everything the EAL holds (these tests run with --no-huge).
  void TearDown() override {}
};

// gtest_main owns main(), so the Environment registers itself during static initialisation.
[[maybe_unused]] ::testing::Environment* const
    kEalEnvironment =  // NOLINT(cert-err58-cpp): a throw here ends the test binary, as it should
    ::testing::AddGlobalTestEnvironment(new EalEnvironment);

}  // namespace
