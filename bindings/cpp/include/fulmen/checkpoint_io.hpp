// fulmen C++ binding: Lightning's CheckpointIO plugin, a store the trainer
// hands the bytes of every checkpoint to (Trainer::set_checkpoint_io).
#pragma once

#include "error.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// Lightning's CheckpointIO: a store for the bytes of every checkpoint a
/// trainer saves (ModelCheckpoint, last, on-exception, hpc,
/// save_checkpoint; both formats), loads (`ckpt_path`) and removes
/// (ModelCheckpoint's older top-k files). Paths are those fulmen would use
/// on disk; the store may map them anywhere. With the trainer option
/// `async_checkpoint_io`, `save` runs on a background thread of the
/// library (one call at a time either way). An exception stops the run
/// and is rethrown by it.
class CheckpointIO {
public:
    virtual ~CheckpointIO() = default;
    /// Stores `size` bytes at `data` (valid during the call) as `path`.
    virtual void save(const std::uint8_t* data, std::size_t size, const std::string& path) = 0;
    /// The bytes stored as `path`.
    virtual std::vector<std::uint8_t> load(const std::string& path) = 0;
    /// Removes `path`; one that is not there is no error.
    virtual void remove(const std::string& path) = 0;
};

namespace detail {

/// The C callbacks over a CheckpointIO, and the bytes of a load between
/// its size query and its copy.
struct CheckpointIOBox {
    std::unique_ptr<CheckpointIO> io;
    std::mutex mutex;
    std::string loading_path;
    std::vector<std::uint8_t> loading;

    static void free(void* ud) noexcept { delete static_cast<CheckpointIOBox*>(ud); }
    static fulmen_error* save(void* ud, const std::uint8_t* bytes, std::size_t len, const char* path) noexcept {
        return guard_callback([&] { static_cast<CheckpointIOBox*>(ud)->io->save(bytes, len, path); });
    }
    static fulmen_error* load(void* ud, const char* path, std::uint8_t* buffer, std::size_t capacity,
                              std::size_t* out_len) noexcept {
        return guard_callback([&] {
            auto* self = static_cast<CheckpointIOBox*>(ud);
            std::lock_guard<std::mutex> lock(self->mutex);
            if (buffer == nullptr) {
                self->loading = self->io->load(path);
                self->loading_path = path;
                *out_len = self->loading.size();
                return;
            }
            if (self->loading_path != path) {
                throw Error(FULMEN_CODE_CALLBACK, std::string("load of ") + path + ": no size was asked first");
            }
            const std::size_t n = std::min(capacity, self->loading.size());
            if (n > 0) std::memcpy(buffer, self->loading.data(), n);
            *out_len = n;
            self->loading = {};
            self->loading_path.clear();
        });
    }
    static fulmen_error* remove(void* ud, const char* path) noexcept {
        return guard_callback([&] { static_cast<CheckpointIOBox*>(ud)->io->remove(path); });
    }
    static fulmen_checkpoint_io_vtable vtable(CheckpointIOBox* box) noexcept {
        fulmen_checkpoint_io_vtable vt{};
        vt.struct_size = sizeof vt;
        vt.userdata = box;
        vt.userdata_free = &CheckpointIOBox::free;
        vt.save = &CheckpointIOBox::save;
        vt.load = &CheckpointIOBox::load;
        vt.remove = &CheckpointIOBox::remove;
        return vt;
    }
};

}  // namespace detail

}  // namespace fulmen
