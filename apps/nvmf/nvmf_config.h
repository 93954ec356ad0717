// uroce-nvmf-target's own section of the configuration file, `nvmf:` (next to eal, ports, engine, ... which
// config/ reads): subsystems with their namespaces and backends, the addresses to listen on, and queue limits.
// Validated like the rest of the configuration: every error names its key and says what is wrong
// ("nvmf.subsystems[0].namespaces[1].nsid: 1 is used twice in this subsystem"), unknown keys included.
//
//   nvmf:
//     listen: [{address: 198.18.0.100, port: 4420}]   # default: port 4420 on the port's first address
//     limits: {max_queue_size: 128, max_io_queues: 8, inline_data_size: 4096, mdts: 5, keep_alive_granularity_ms: 1000,
//              max_queues: 256, max_queues_per_host: 130, connect_timeout_ms: 10000}
//              # queues at once, of them from one host address; a queue's wait for Fabrics Connect
//     subsystems:
//       - nqn: nqn.2026-11.io.uroce:ram0
//         serial: uroce0001              # ASCII, at most 20
//         model: uroce NVMe-oF target    # ASCII, at most 40
//         allowed_hosts: []              # host NQNs; empty: any
//         namespaces:
//           - {nsid: 1, ram_mb: 256, block_size: 512}
//           - {nsid: 2, file: /srv/nvmf/ns2.img, size_mb: 1024, block_size: 4096}   # or a block device
//
// A namespace has one backend: `ram_mb`, or `file` (a regular file or a block device; `size_mb` creates the file
// or extends it, `io: auto | io_uring | threads` picks how it is driven, file_backend.h). File errors name the
// key: "nvmf.subsystems[0].namespaces[1].file: /srv/x: does not exist (size_mb creates it)".
// Without the section: one subsystem, kDefaultNqn, with one 256 MiB RAM namespace of 512-byte blocks.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf {

inline constexpr const char* kDefaultNqn = "nqn.2026-11.io.uroce:ram0";
inline constexpr uint16_t kDefaultPort = 4420;

struct ListenAddress {
  std::string address;  // empty: the port's first address
  uint16_t port = kDefaultPort;
};

struct NvmfConfig {
  TargetConfig target;  // backends created; target.ports filled from `listen` once addresses are known
  std::vector<ListenAddress> listen;
};

// Reads the `nvmf` section of the YAML document `yaml_text` (nothing else in it is looked at): the configuration,
// or every error found, one per line as "key: message".
[[nodiscard]] std::variant<NvmfConfig, std::vector<std::string>> load_nvmf_config(std::string_view yaml_text);

}  // namespace uroce::nvmf
