// The EAL exists once per process: this Environment starts it before the first test (--no-huge, two engine
// lcores on the first two CPUs, see init_eal_for_tests) and cleans it up after the last.
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
  void TearDown() override { rte_eal_cleanup(); }
};

// gtest_main owns main(), so the Environment registers itself during static initialisation.
[[maybe_unused]] ::testing::Environment* const
    kEalEnvironment =  // NOLINT(cert-err58-cpp): a throw here ends the test binary, as it should
    ::testing::AddGlobalTestEnvironment(new EalEnvironment);

}  // namespace
