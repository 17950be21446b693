// fulmen C++ binding: errors. Every failing call throws fulmen::Error.
#pragma once

#include <fulmen.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace fulmen {

/// The stable numeric error codes of the C API (FULMEN_CODE_*).
using Code = fulmen_code;

/// The exception every failing fulmen call throws: a message and a code.
class Error : public std::runtime_error {
public:
    /// An error with a `fulmen_code` value and a message.
    Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}

    /// The stable error code (a `fulmen_code` value).
    Code code() const noexcept { return code_; }

private:
    Code code_;
};

namespace detail {

/// Owns a C error until it has been turned into an exception.
struct ErrorDeleter {
    void operator()(fulmen_error* e) const noexcept { fulmen_error_free(e); }
};
using ErrorPtr = std::unique_ptr<fulmen_error, ErrorDeleter>;

/// The first exception a host callback threw on this thread, waiting to
/// be rethrown by the fulmen call that ran the callback.
inline std::exception_ptr& pending_exception() {
    thread_local std::exception_ptr pending;
    return pending;
}

/// Whether another callback failed after the pending exception was
/// recorded (a clean-up after the failure: an accelerator's teardown).
inline bool& later_callback_failed() {
    thread_local bool later = false;
    return later;
}

/// Forgets a stale callback exception before a call that runs callbacks.
inline void clear_pending_exception() noexcept {
    pending_exception() = nullptr;
    later_callback_failed() = false;
}

/// Records the exception in flight (call from a catch block) and returns
/// the C error that tells fulmen the callback failed. The first exception
/// stays recorded: a later one only marks that several failed.
inline fulmen_error* capture_exception() noexcept {
    if (pending_exception()) {
        later_callback_failed() = true;
    } else {
        pending_exception() = std::current_exception();
    }
    try {
        throw;
    } catch (const Error& e) {
        return fulmen_error_new(e.code(), e.what());
    } catch (const std::exception& e) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, e.what());
    } catch (...) {
        return fulmen_error_new(FULMEN_CODE_CALLBACK, "unknown C++ exception in a callback");
    }
}

/// Runs `body` (a callback's work) and turns any exception into a C error.
template <class Body>
fulmen_error* guard_callback(Body&& body) noexcept {
    try {
        std::forward<Body>(body)();
        return nullptr;
    } catch (...) {
        return capture_exception();
    }
}

}  // namespace detail

/// Throws for a non-NULL C error (freeing it): the original exception of a
/// failed C++ callback if one caused it, otherwise a fulmen::Error. When
/// several callbacks failed in the call (a step, then the teardown after
/// it), one exception cannot carry them all: a fulmen::Error with fulmen's
/// code and message (the first failure's, the later ones attached).
inline void check(fulmen_error* err) {
    if (err == nullptr) return;
    detail::ErrorPtr owned(err);
    std::exception_ptr original = std::exchange(detail::pending_exception(), nullptr);
    const bool several = std::exchange(detail::later_callback_failed(), false);
    if (original && !several) std::rethrow_exception(original);
    throw Error(static_cast<Code>(fulmen_error_code(err)), fulmen_error_message(err));
}

}  // namespace fulmen

// The start-up ABI check comes with every binding header.
#include "abi.hpp"
