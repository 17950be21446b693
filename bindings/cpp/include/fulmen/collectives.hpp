// fulmen C++ binding: a custom accelerator's own collectives (a vendor's
// communication library) for DDP on its devices: the job's key-value store
// (DistStore) and one rank's group (CollectiveGroup), which a
// CustomAccelerator opens in open_collectives.
#pragma once

#include "error.hpp"
#include "tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fulmen {

/// How all_reduce combines the ranks' values (fulmen_reduce_op).
enum class ReduceOp : int32_t {
    Sum = FULMEN_REDUCE_OP_SUM,          ///< Element-wise sum.
    Product = FULMEN_REDUCE_OP_PRODUCT,  ///< Element-wise product.
    Min = FULMEN_REDUCE_OP_MIN,          ///< Element-wise minimum.
    Max = FULMEN_REDUCE_OP_MAX,          ///< Element-wise maximum.
};

/// The key-value store every rank of a job shares (fulmen_dist_store),
/// lent to open_collectives: valid until the group it opened is destroyed.
/// Ranks exchange a unique id through it. Copyable; it borrows.
class DistStore {
public:
    /// Wraps a store handle fulmen lent.
    explicit DistStore(const fulmen_dist_store* store) noexcept : store_(store) {}

    /// Sets `key` to `len` bytes at `data`.
    void set(const std::string& key, const void* data, size_t len) const {
        check(fulmen_dist_store_set(store_, key.c_str(), data, len));
    }
    /// Sets `key` to `value`.
    void set(const std::string& key, const std::vector<uint8_t>& value) const {
        set(key, value.data(), value.size());
    }
    /// Waits for `key` (up to the job's timeout) and returns its value.
    std::vector<uint8_t> get(const std::string& key) const {
        std::vector<uint8_t> value(64);
        size_t len = 0;
        fulmen_error* e = fulmen_dist_store_get(store_, key.c_str(), value.data(), value.size(), &len);
        if (e != nullptr && fulmen_error_code(e) == FULMEN_CODE_OUT_OF_RANGE) {
            fulmen_error_free(e);
            value.resize(len);
            e = fulmen_dist_store_get(store_, key.c_str(), value.data(), value.size(), &len);
        }
        check(e);
        value.resize(len);
        return value;
    }
    /// Adds `delta` to the counter `key` (0 when new); returns its value.
    int64_t add(const std::string& key, int64_t delta) const {
        int64_t out = 0;
        check(fulmen_dist_store_add(store_, key.c_str(), delta, &out));
        return out;
    }
    /// Deletes `key`; returns whether it was set.
    bool remove(const std::string& key) const {
        bool deleted = false;
        check(fulmen_dist_store_delete(store_, key.c_str(), &deleted));
        return deleted;
    }

private:
    const fulmen_dist_store* store_;
};

/// One rank's group of a custom accelerator's collectives library, opened
/// by CustomAccelerator::open_collectives once per job and destroyed when
/// the job ends. Its calls come one at a time, in the same order on every
/// rank, from the thread running the collective (the trainer's, or
/// libtorch's autograd thread for the device during backward). The
/// tensors share storage with those reduced: write the results in place
/// (copy_from, copy_, or through data_ptr on the device). An exception
/// fails the collective and the run (FULMEN_CODE_DISTRIBUTED, with its
/// message).
class CollectiveGroup {
public:
    CollectiveGroup() = default;
    virtual ~CollectiveGroup() = default;
    CollectiveGroup(const CollectiveGroup&) = delete;
    CollectiveGroup& operator=(const CollectiveGroup&) = delete;

    /// Reduces `tensors` in place over the ranks with `op`.
    virtual void all_reduce(std::vector<Tensor>& tensors, ReduceOp op) = 0;
    /// Copies rank `root`'s `tensors` into every rank's.
    virtual void broadcast(std::vector<Tensor>& tensors, int root) = 0;
    /// Writes rank r's `input` into `outputs[r]` for every rank.
    virtual void all_gather(const Tensor& input, std::vector<Tensor>& outputs) = 0;
    /// Returns when every rank has called it.
    virtual void barrier() = 0;
    /// Reduces `input` over the ranks with `op` and writes this rank's
    /// block of the result to `output` (`input` holds world size x
    /// `output`'s elements; rank r's block is the r-th run), returning
    /// true. FSDP reduces its gradients with it. The default returns false
    /// at once: the library has none, and fulmen all-reduces the whole
    /// input instead (world size times the data) and does not ask this
    /// group again. Every rank's group must answer alike.
    virtual bool reduce_scatter(const Tensor& /*input*/, Tensor& /*output*/, ReduceOp /*op*/) { return false; }
};

}  // namespace fulmen
