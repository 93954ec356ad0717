// Private to crc32_copy*.cc: the variants of crc32_ieee_copy (crc32.h), one per file, each compiled with
// only the ISA flags it needs (STYLE.md §11), as the plain CRC variants are (crc32_internal.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::proto::crc32_internal {

// crc32_ieee_copy's contract, one per variant. crc32_copy.cc calls one only if the CPU has its ISA.
uint32_t crc32_portable_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;
uint32_t crc32_pclmul_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;
uint32_t crc32_vpclmul_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;
uint32_t crc32_vpclmul256_copy(uint32_t crc, void* dst, const void* src, std::size_t len) noexcept;

}  // namespace uroce::proto::crc32_internal
