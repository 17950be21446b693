// Shared helpers of fulmen's C++ shims (csrc/*.cpp).
//
// Every shim function is `extern "C"`, returns an int status and never lets
// a C++ exception escape: FULMEN_CXX_TRY / FULMEN_CXX_CATCH wrap the body,
// and the message of a caught exception is copied (truncated, always
// NUL-terminated) into the caller's `err` buffer of `err_len` bytes.
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>
#include <string>

#include <c10/util/Exception.h>

// Status codes shared with src/accelerators/cxx.rs.
#define FULMEN_CXX_OK 0
#define FULMEN_CXX_ERROR 1
#define FULMEN_CXX_UNSUPPORTED 2

namespace fulmen_cxx {

// Copies `msg` into `err` (at most err_len - 1 bytes, then a NUL).
inline void write_message(const std::string& msg, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) {
    return;
  }
  size_t n = msg.size() < err_len - 1 ? msg.size() : err_len - 1;
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

// Keeps the first lines of a libtorch message, dropping the C++ backtrace.
inline std::string short_message(const char* what) {
  std::string text(what == nullptr ? "unknown C++ exception" : what);
  size_t cut = text.find("\nException raised from");
  if (cut != std::string::npos) {
    text.resize(cut);
  }
  return text;
}

}  // namespace fulmen_cxx

#define FULMEN_CXX_TRY try {
#define FULMEN_CXX_CATCH(err, err_len)                                            \
  return FULMEN_CXX_OK;                                                           \
  }                                                                               \
  catch (const c10::Error& e) {                                                   \
    fulmen_cxx::write_message(fulmen_cxx::short_message(e.what_without_backtrace()), err, err_len); \
    return FULMEN_CXX_ERROR;                                                      \
  }                                                                               \
  catch (const std::exception& e) {                                               \
    fulmen_cxx::write_message(fulmen_cxx::short_message(e.what()), err, err_len); \
    return FULMEN_CXX_ERROR;                                                      \
  }                                                                               \
  catch (...) {                                                                   \
    fulmen_cxx::write_message("unknown C++ exception", err, err_len);            \
    return FULMEN_CXX_ERROR;                                                      \
  }
