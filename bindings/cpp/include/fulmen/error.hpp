// fulmen C++ binding: errors. Every failing call throws fulmen::Error.
#pragma once

#include <fulmen.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

/// An exception a host callback threw, with the message fulmen was given.
struct CapturedException {
    std::exception_ptr exception;
    std::string message;
};

/// The exceptions host callbacks threw on this thread during the current
/// fulmen call, first first, waiting for the call to return (at most
/// `kMaxCaptured`: a call whose callbacks keep failing keeps the first).
inline std::vector<CapturedException>& captured_exceptions() {
    thread_local std::vector<CapturedException> captured;
    return captured;
}
inline constexpr size_t kMaxCaptured = 8;

/// Whether a callback exception is waiting for the call to return.
inline bool pending_exception() noexcept { return !captured_exceptions().empty(); }

/// Forgets stale callback exceptions before a call that runs callbacks.
inline void clear_pending_exception() noexcept { captured_exceptions().clear(); }

/// Records the exception in flight (call from a catch block) and returns
/// the C error that tells fulmen the callback failed.
inline fulmen_error* capture_exception() noexcept {
    fulmen_code code = FULMEN_CODE_CALLBACK;
    std::string message = "unknown C++ exception in a callback";
    try {
        throw;
    } catch (const Error& e) {
        code = e.code();
        message = e.what();
    } catch (const std::exception& e) {
        message = e.what();
    } catch (...) {
    }
    try {
        auto& captured = captured_exceptions();
        if (captured.size() < kMaxCaptured) captured.push_back({std::current_exception(), message});
    } catch (...) {
        // Out of memory: the call still fails with fulmen's error.
    }
    return fulmen_error_new(code, message.c_str());
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

/// Throws for a non-NULL C error (freeing it): the original exception of
/// the failed C++ callback that caused it, otherwise a fulmen::Error. When
/// several callbacks threw during the call, the cause is the one whose
/// message fulmen's error carries (one fulmen swallowed, such as a
/// throwing `is_available`, is not); when fulmen's error carries several
/// (a step, then the teardown after it), one exception cannot hold them
/// all: a fulmen::Error with fulmen's code and message, the first failure
/// first.
inline void check(fulmen_error* err) {
    if (err == nullptr) return;
    detail::ErrorPtr owned(err);
    std::vector<detail::CapturedException> captured = std::exchange(detail::captured_exceptions(), {});
    const std::string message = fulmen_error_message(err);
    if (captured.size() == 1) std::rethrow_exception(captured[0].exception);
    const detail::CapturedException* cause = nullptr;
    size_t carried = 0;
    for (const auto& c : captured) {
        if (message.find(c.message) == std::string::npos) continue;
        if (cause == nullptr) cause = &c;
        carried++;
    }
    if (carried == 1) std::rethrow_exception(cause->exception);
    throw Error(static_cast<Code>(fulmen_error_code(err)), message);
}

}  // namespace fulmen

// The start-up ABI check comes with every binding header.
#include "abi.hpp"
