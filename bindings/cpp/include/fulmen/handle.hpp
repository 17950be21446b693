// fulmen C++ binding: the move-only owner every handle class builds on.
#pragma once

#include "error.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fulmen::detail {

/// Deleter that calls a C `*_free` function.
template <class T, void (*Free)(T*)>
struct FreeWith {
    void operator()(T* p) const noexcept { Free(p); }
};

/// A move-only owner of one C handle, freed with `Free` on destruction.
/// A moved-from owner holds NULL; C calls then fail with
/// FULMEN_CODE_NULL_ARGUMENT (thrown as fulmen::Error), never crash.
template <class T, void (*Free)(T*)>
class Handle {
public:
    /// The C handle, still owned by this object (for interop with fulmen.h).
    T* get() const noexcept { return ptr_.get(); }

    /// Gives up ownership and returns the C handle (the caller frees it).
    T* release() noexcept { return ptr_.release(); }

    /// Whether a handle is held (false after a move or release).
    explicit operator bool() const noexcept { return ptr_ != nullptr; }

protected:
    Handle() = default;
    explicit Handle(T* owned) noexcept : ptr_(owned) {}

private:
    std::unique_ptr<T, FreeWith<T, Free>> ptr_;
};

/// Calls `fn(&out)` for a C function writing a new handle, checks the
/// error and returns the handle.
template <class T, class Fn>
T* make(Fn&& fn) {
    T* out = nullptr;
    check(fn(&out));
    return out;
}

/// Calls `fn(&out)` for a C getter writing a value, checks and returns it.
template <class V, class Fn>
V read(Fn&& fn) {
    V out{};
    check(fn(&out));
    return out;
}

/// Reads an array of counts through the C pattern `fn(out, capacity,
/// &count)` that fails with FULMEN_CODE_OUT_OF_RANGE (writing only the
/// count) when the array is too small.
template <class Fn>
std::vector<int64_t> read_counts(Fn&& fn) {
    size_t n = 0;
    std::vector<int64_t> counts;
    fulmen_error* err = fn(nullptr, 0, &n);
    if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_OUT_OF_RANGE) {
        fulmen_error_free(err);
        counts.resize(n);
        err = fn(counts.data(), counts.size(), &n);
    }
    check(err);
    counts.resize(std::min(n, counts.size()));
    return counts;
}

/// Batch counts with -1 (a loader of unknown length) as nullopt.
inline std::vector<std::optional<int64_t>> optional_counts(const std::vector<int64_t>& counts) {
    std::vector<std::optional<int64_t>> out;
    for (int64_t c : counts) {
        if (c < 0) {
            out.emplace_back(std::nullopt);
        } else {
            out.emplace_back(c);
        }
    }
    return out;
}

/// Reads a string through the C pattern `fn(buf, capacity, &len)` that
/// fails with FULMEN_CODE_OUT_OF_RANGE (writing only the length) when the
/// buffer is too small.
template <class Fn>
std::string read_string(Fn&& fn) {
    std::vector<char> buf(256);
    size_t len = 0;
    fulmen_error* err = fn(buf.data(), buf.size(), &len);
    if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_OUT_OF_RANGE && len >= buf.size()) {
        fulmen_error_free(err);
        buf.resize(len + 1);
        err = fn(buf.data(), buf.size(), &len);
    }
    check(err);
    return std::string(buf.data(), len);
}

/// A C string argument that may be NULL (empty string -> NULL).
inline const char* c_str_or_null(const std::string& s) noexcept { return s.empty() ? nullptr : s.c_str(); }

}  // namespace fulmen::detail
