// fulmen C++ binding: the check that the libfulmen loaded serves the
// fulmen.h this program was compiled with (fulmen_abi_check).
//
// Every program that includes a binding header makes the check once when
// it starts (during static initialisation, before main and before the
// static initialisers of the translation units that include the binding):
// on a mismatch it prints the library's message to stderr and aborts.
// Define FULMEN_NO_STARTUP_ABI_CHECK in every translation unit (-D on the
// command line) to skip that, and call fulmen::check_abi() yourself.
#pragma once

#include "error.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace fulmen {

/// Throws fulmen::Error (FULMEN_CODE_UNSUPPORTED) when the libfulmen loaded
/// cannot serve the header this code was compiled with: another ABI series,
/// or a library older than the header.
inline void check_abi() { check(fulmen_abi_check(FULMEN_ABI_VERSION)); }

/// The loaded library's version as one number, MAJOR * 1000000 + MINOR *
/// 1000 + PATCH (FULMEN_ABI_VERSION of its own header).
inline uint32_t abi_version() noexcept { return fulmen_abi_version(); }

namespace detail {

/// The start-up check: true, or a message on stderr and abort().
inline bool abi_checked_at_startup() noexcept {
    fulmen_error* err = fulmen_abi_check(FULMEN_ABI_VERSION);
    if (err == nullptr) return true;
    std::fprintf(stderr, "fulmen: %s\n", fulmen_error_message(err));
    fulmen_error_free(err);
    std::abort();
}

#ifndef FULMEN_NO_STARTUP_ABI_CHECK
/// Initialised once per program (an inline variable), before main.
inline const bool abi_startup_check = abi_checked_at_startup();
#endif

}  // namespace detail
}  // namespace fulmen
