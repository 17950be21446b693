// The libtorch version this shim compiles against (TORCH_VERSION,
// TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR): the header moved in 2.10.
#pragma once
#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif
