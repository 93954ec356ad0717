// <immintrin.h> for the AVX-512 files (crc32_vpclmul.cc, crc32_copy_vpclmul.cc). GCC 12 (seen with 12.2) reports
// its own AVX-512 intrinsics as reading an uninitialised variable (the "don't care" merge source, GCC bug 105593)
// wherever they are inlined; the warning is silenced for this header only, so diagnostics in the including
// file's own code are unaffected.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
