// fulmen C++ binding: a running callback lent to helper threads
// (fulmen_callback_context, fulmen_callback_attach / _detach).
#pragma once

#include "error.hpp"
#include "handle.hpp"

namespace fulmen {

/// A running callback (a step, hook, data source function, host forward,
/// ...), named so that a helper thread can work inside it. Make it inside
/// the callback with current(); on the helper thread, an AttachedScope
/// attaches that thread while it lives: the tensors it makes join the
/// callback's scope, its fulmen calls count as the callback's own (a call
/// into the object running the callback is refused instead of
/// deadlocking; the callback's fulmen_host_call is usable), and it runs
/// with the callback's grad mode and autocast. The callback waits for the
/// fulmen calls attached threads are making when it returns, and refuses
/// their later calls until they detach. The object may outlive the
/// callback (it then attaches no more) and may be destroyed on any thread.
class CallbackContext : public detail::Handle<fulmen_callback_context, fulmen_callback_context_free> {
public:
    /// The callback running on this thread (or, on a thread attached to a
    /// callback, that one). Throws Error (FULMEN_CODE_INVALID_STATE) when
    /// no callback runs here.
    static CallbackContext current() {
        return CallbackContext(detail::make<fulmen_callback_context>(
            [](fulmen_callback_context** out) { return fulmen_callback_context_current(out); }));
    }

    /// Attaches the calling thread to the callback until detach(); prefer
    /// AttachedScope. Throws Error (FULMEN_CODE_INVALID_STATE) when the
    /// callback has returned, the thread is attached already or runs a
    /// fulmen callback itself.
    void attach() const { check(fulmen_callback_attach(get())); }

    /// Detaches the calling thread. Throws Error
    /// (FULMEN_CODE_INVALID_STATE) when it is not attached.
    static void detach() { check(fulmen_callback_detach()); }

    /// Takes ownership of a C handle (NULL gives an empty object).
    static CallbackContext adopt(fulmen_callback_context* handle) noexcept { return CallbackContext(handle); }

private:
    explicit CallbackContext(fulmen_callback_context* owned) noexcept : Handle(owned) {}
};

/// Attaches the calling thread to a running callback for the scope's
/// lifetime (fulmen_callback_attach in the constructor, which throws as
/// CallbackContext::attach does; fulmen_callback_detach in the destructor,
/// which never throws).
class AttachedScope {
public:
    /// Attaches the calling thread to `ctx`'s callback.
    explicit AttachedScope(const CallbackContext& ctx) { ctx.attach(); }

    /// Detaches the calling thread.
    ~AttachedScope() { fulmen_error_free(fulmen_callback_detach()); }

    AttachedScope(const AttachedScope&) = delete;
    AttachedScope& operator=(const AttachedScope&) = delete;
    AttachedScope(AttachedScope&&) = delete;
    AttachedScope& operator=(AttachedScope&&) = delete;
};

}  // namespace fulmen
