#include "apps/common/errno_text.h"

#include <cstring>

namespace uroce::apps {

std::string errno_text(int error) {
  char buffer[256];
  // glibc's GNU strerror_r (g++ defines _GNU_SOURCE): it returns the text, in `buffer` or a constant string.
  return strerror_r(error, buffer, sizeof buffer);
}

}  // namespace uroce::apps
