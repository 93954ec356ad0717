// An errno value as text, for the tools' messages.
#pragma once

#include <string>

namespace uroce::apps {

// What strerror(error) says ("Connection refused"), without strerror's shared buffer: safe from any thread.
[[nodiscard]] std::string errno_text(int error);

}  // namespace uroce::apps
