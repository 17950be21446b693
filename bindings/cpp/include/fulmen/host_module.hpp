// fulmen C++ binding: modules whose forward pass is a C++ function
// (fulmen_model_host_new), and registered parameters and buffers.
#pragma once

#include "model.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fulmen {

/// The module a host forward runs for (borrowed: valid during the call).
class HostCall {
public:
    /// Wraps the borrowed C call.
    explicit HostCall(fulmen_host_call* call) noexcept : call_(call) {}
    /// A registered tensor ("scale") or a child's ("proj.weight").
    Tensor get(const std::string& name) const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_host_call_get(call_, name.c_str(), o); });
    }
    /// Runs the child at `path` on several inputs (nullptr: left out).
    std::vector<Tensor> forward_child(const std::string& path, std::initializer_list<const Tensor*> inputs) const {
        std::vector<const fulmen_tensor*> handles;
        for (const Tensor* t : inputs) handles.push_back(Tensor::optional_handle(t, "inputs"));
        return Tensor::make_list([&](fulmen_tensor** outs, size_t capacity, size_t* count) {
            return fulmen_host_call_forward_child(call_, path.c_str(), handles.data(), handles.size(), outs, capacity,
                                                  count);
        });
    }
    /// Whether the module is in training mode.
    bool is_training() const {
        return detail::read<bool>([&](bool* o) { return fulmen_host_call_is_training(call_, o); });
    }

private:
    fulmen_host_call* call_;
};

/// A forward pass: the module's call and its inputs (nullptr: left out);
/// returns exactly the module's number of outputs.
using HostForward = std::function<std::vector<Tensor>(HostCall&, const std::vector<const Tensor*>&)>;

namespace detail {

struct HostForwardBox {
    HostForward forward;
    size_t num_outputs;

    static fulmen_error* call(void* ud, fulmen_host_call* c, const fulmen_tensor* const* inputs, size_t n,
                              fulmen_tensor** outs) {
        return guard_callback([&] {
            auto* box = static_cast<HostForwardBox*>(ud);
            std::vector<Tensor> held;
            held.reserve(n);
            std::vector<const Tensor*> args(n, nullptr);
            for (size_t i = 0; i < n; i++) {
                if (inputs[i] == nullptr) continue;
                held.push_back(Tensor::make([&](fulmen_tensor** o) { return fulmen_tensor_share(inputs[i], o); }));
                args[i] = &held.back();
            }
            HostCall call(c);
            std::vector<Tensor> results = box->forward(call, args);
            if (results.size() != box->num_outputs) {
                throw Error(FULMEN_CODE_CALLBACK, "the host forward returned " + std::to_string(results.size()) +
                                                      " tensors, not " + std::to_string(box->num_outputs));
            }
            for (size_t i = 0; i < results.size(); i++) {
                outs[i] = make<fulmen_tensor>([&](fulmen_tensor** o) { return fulmen_tensor_share(results[i].get(), o); });
            }
        });
    }
    static void free(void* ud) { delete static_cast<HostForwardBox*>(ud); }
};

}  // namespace detail

/// A module whose forward pass is `forward` (returning `num_outputs`
/// tensors): add children with Model::add, tensors with
/// register_parameter / register_buffer; reach them through the HostCall.
inline Model host_module(size_t num_outputs, HostForward forward) {
    auto box = std::make_unique<detail::HostForwardBox>(detail::HostForwardBox{std::move(forward), num_outputs});
    fulmen_host_module_vtable vt{};
    vt.struct_size = sizeof vt;
    vt.userdata = box.get();
    vt.userdata_free = &detail::HostForwardBox::free;
    vt.num_outputs = num_outputs;
    vt.forward = &detail::HostForwardBox::call;
    Model m = Model::adopt(detail::make<fulmen_model>([&](fulmen_model** o) { return fulmen_model_host_new(&vt, o); }));
    box.release();  // owned by the module now
    return m;
}

/// Registers `t` as a trainable parameter `name` of the module at `path`
/// ("" for `model` itself); it shares `t`'s storage.
inline void register_parameter(Model& model, const std::string& name, const Tensor& t, const std::string& path = "") {
    check(fulmen_model_register_parameter(model.get(), path.c_str(), name.c_str(), t.get()));
}

/// Registers `t` as a buffer `name` (saved, moved, broadcast; not trained).
inline void register_buffer(Model& model, const std::string& name, const Tensor& t, const std::string& path = "") {
    check(fulmen_model_register_buffer(model.get(), path.c_str(), name.c_str(), t.get()));
}

}  // namespace fulmen
