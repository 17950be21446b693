// fulmen C++ binding: tensors, their element types, operators and losses.
#pragma once

#include "handle.hpp"

#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// Element type of a tensor (the C `fulmen_dtype`).
enum class DType : int32_t {
    F32 = FULMEN_DTYPE_F32,
    F64 = FULMEN_DTYPE_F64,
    F16 = FULMEN_DTYPE_F16,
    BF16 = FULMEN_DTYPE_BF16,
    I64 = FULMEN_DTYPE_I64,
    I32 = FULMEN_DTYPE_I32,
    U8 = FULMEN_DTYPE_U8,
    Bool = FULMEN_DTYPE_BOOL,
    I8 = FULMEN_DTYPE_I8,
    I16 = FULMEN_DTYPE_I16,
};

/// Kind of device a tensor lives on (the C `fulmen_device_type`).
enum class DeviceType : int32_t {
    Cpu = FULMEN_DEVICE_TYPE_CPU,
    Cuda = FULMEN_DEVICE_TYPE_CUDA,
    Mps = FULMEN_DEVICE_TYPE_MPS,
    Xla = FULMEN_DEVICE_TYPE_XLA,
    Xpu = FULMEN_DEVICE_TYPE_XPU,                 ///< Intel's XPU backend.
    Hpu = FULMEN_DEVICE_TYPE_HPU,                 ///< Habana Gaudi's HPU backend.
    Mtia = FULMEN_DEVICE_TYPE_MTIA,               ///< Meta's MTIA backend.
    Ipu = FULMEN_DEVICE_TYPE_IPU,                 ///< Graphcore's IPU backend.
    Meta = FULMEN_DEVICE_TYPE_META,               ///< Shapes and dtypes without data.
    PrivateUse1 = FULMEN_DEVICE_TYPE_PRIVATE_USE1,  ///< An out-of-tree backend under its own name ("npu").
};

/// A device: its type and index.
struct Device {
    DeviceType type = DeviceType::Cpu;  ///< Kind of device.
    int64_t index = 0;                  ///< Device index within its kind.

    /// The host CPU.
    static Device cpu() { return {DeviceType::Cpu, 0}; }
    /// CUDA device `index`.
    static Device cuda(int64_t index = 0) { return {DeviceType::Cuda, index}; }
    /// Device `index` of the PrivateUse1 backend (the one named "npu", say).
    static Device private_use1(int64_t index = 0) { return {DeviceType::PrivateUse1, index}; }
    /// Same type and index.
    bool operator==(const Device& o) const { return type == o.type && index == o.index; }
    /// Different type or index.
    bool operator!=(const Device& o) const { return !(*this == o); }
};

/// How a loss reduces over the batch (the C `fulmen_reduction`).
enum class Reduction : int32_t {
    None = FULMEN_REDUCTION_NONE,
    Mean = FULMEN_REDUCTION_MEAN,
    Sum = FULMEN_REDUCTION_SUM,
    BatchMean = FULMEN_REDUCTION_BATCH_MEAN,  ///< Sum / batch size: kl_div only.
};

/// Elementwise comparison (the C `fulmen_compare`).
enum class Compare : int32_t {
    Eq = FULMEN_COMPARE_EQ,
    Ne = FULMEN_COMPARE_NE,
    Lt = FULMEN_COMPARE_LT,
    Le = FULMEN_COMPARE_LE,
    Gt = FULMEN_COMPARE_GT,
    Ge = FULMEN_COMPARE_GE,
};

/// A tensor shape (sizes per dimension; `-1` infers one size where allowed).
using Shape = std::vector<int64_t>;

/// IEEE half precision value, stored as its bit pattern (converted by fulmen).
struct Half {
    uint16_t bits = 0;  ///< The 16-bit pattern.

    /// Zero.
    Half() = default;
    /// Rounds a float to half (nearest even).
    Half(float value) : bits(fulmen_f16_from_f32(value)) {}
    /// A half from its bit pattern.
    static Half from_bits(uint16_t b) { Half h; h.bits = b; return h; }
    /// The value as a float.
    float to_float() const { return fulmen_f32_from_f16(bits); }
    /// The value as a float.
    explicit operator float() const { return to_float(); }
};

/// bfloat16 value, stored as its bit pattern (converted by fulmen).
struct BFloat16 {
    uint16_t bits = 0;  ///< The 16-bit pattern.

    /// Zero.
    BFloat16() = default;
    /// Rounds a float to bfloat16 (nearest even).
    BFloat16(float value) : bits(fulmen_bf16_from_f32(value)) {}
    /// A bfloat16 from its bit pattern.
    static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
    /// The value as a float.
    float to_float() const { return fulmen_f32_from_bf16(bits); }
    /// The value as a float.
    explicit operator float() const { return to_float(); }
};

/// Maps a host element type to its DType (float, double, Half, BFloat16,
/// int64_t, int32_t, int16_t, int8_t, uint8_t, bool).
template <class T>
struct DTypeOf;
/// float is F32.
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
/// double is F64.
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
/// Half is F16.
template <> struct DTypeOf<Half> { static constexpr DType value = DType::F16; };
/// BFloat16 is BF16.
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BF16; };
/// int64_t is I64.
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
/// int32_t is I32.
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::I32; };
/// int16_t is I16.
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::I16; };
/// int8_t is I8.
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::I8; };
/// uint8_t is U8.
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };
/// bool is Bool (one byte per element).
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };

/// The DType of host element type `T`.
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

class Tensor;

/// A borrowed Tensor in an argument list. It also binds temporaries, which
/// live until the end of the call's full expression: use it for arguments only.
class TensorRef {
public:
    /// Refers to `t`.
    TensorRef(const Tensor& t) noexcept : tensor_(&t) {}
    /// The tensor referred to.
    operator const Tensor&() const noexcept { return *tensor_; }

private:
    const Tensor* tensor_;
};

/// A list of borrowed tensors for calls taking several: `{a, b}`, temporaries too.
using TensorList = std::vector<TensorRef>;

namespace detail {

/// The C handles of a list of tensors.
template <class Range>
std::vector<const fulmen_tensor*> handles(const Range& tensors);

/// Number of elements of a shape (1 for a scalar shape).
inline size_t shape_numel(const Shape& shape) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d < 0 ? 0 : d);
    return n;
}

}  // namespace detail

/// A tensor (libtorch at::Tensor), owning its `fulmen_tensor` handle.
///
/// Every Tensor made by this binding is kept (`fulmen_tensor_keep`), also
/// inside step and data callbacks, so a Tensor always owns its handle: it
/// may be stored beyond the callback and is freed by its destructor.
class Tensor : public detail::Handle<fulmen_tensor, fulmen_tensor_free> {
public:
    /// An empty tensor object (no handle).
    Tensor() = default;

    /// Takes ownership of a handle from the C API (keeping it out of any
    /// open callback scope). NULL gives an empty Tensor.
    static Tensor adopt(fulmen_tensor* handle) {
        Tensor t(handle);
        if (handle != nullptr) check(fulmen_tensor_keep(handle));
        return t;
    }

    // ---- creation ----------------------------------------------------

    /// Copies `nbytes` of row-major host data of element type `dtype`.
    static Tensor from_bytes(const void* data, size_t nbytes, DType dtype, const Shape& shape) {
        static const unsigned char none = 0;
        const void* src = nbytes == 0 ? &none : data;
        return make([&](fulmen_tensor** o) {
            return fulmen_tensor_from_data(src, nbytes, static_cast<int32_t>(dtype), shape.data(), shape.size(), o);
        });
    }

    /// Copies `shape`'s element count of values from `data`.
    template <class T>
    static Tensor from_data(const T* data, const Shape& shape) {
        return from_bytes(data, detail::shape_numel(shape) * sizeof(T), dtype_of<T>, shape);
    }

    /// Copies `values` into a tensor of `shape`.
    template <class T>
    static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
        return from_bytes(values.data(), values.size() * sizeof(T), dtype_of<T>, shape);
    }

    /// Copies `values` into a 1-D tensor.
    template <class T>
    static Tensor from_vector(const std::vector<T>& values) {
        return from_vector(values, Shape{static_cast<int64_t>(values.size())});
    }

    /// Copies booleans into a Bool tensor of `shape`.
    static Tensor from_vector(const std::vector<bool>& values, const Shape& shape) {
        std::vector<uint8_t> bytes(values.begin(), values.end());
        return from_bytes(bytes.data(), bytes.size(), DType::Bool, shape);
    }

    /// Copies booleans into a 1-D Bool tensor.
    static Tensor from_vector(const std::vector<bool>& values) {
        return from_vector(values, Shape{static_cast<int64_t>(values.size())});
    }

    /// Zeros of `shape`.
    static Tensor zeros(const Shape& shape, DType dtype = DType::F32) { return filled(fulmen_tensor_zeros, shape, dtype); }
    /// Ones of `shape`.
    static Tensor ones(const Shape& shape, DType dtype = DType::F32) { return filled(fulmen_tensor_ones, shape, dtype); }
    /// Samples of U[0, 1) from the global generator (floating dtypes).
    static Tensor rand(const Shape& shape, DType dtype = DType::F32) { return filled(fulmen_tensor_rand, shape, dtype); }
    /// Samples of N(0, 1) from the global generator (floating dtypes).
    static Tensor randn(const Shape& shape, DType dtype = DType::F32) { return filled(fulmen_tensor_randn, shape, dtype); }

    /// `shape` filled with `value`.
    static Tensor full(const Shape& shape, double value, DType dtype = DType::F32) {
        return make([&](fulmen_tensor** o) {
            return fulmen_tensor_full(shape.data(), shape.size(), value, static_cast<int32_t>(dtype), o);
        });
    }

    /// `start, start + step, ...` below `end`.
    static Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::F32) {
        return make([&](fulmen_tensor** o) { return fulmen_tensor_arange(start, end, step, static_cast<int32_t>(dtype), o); });
    }

    /// A 0-dimensional tensor holding `value`.
    static Tensor scalar(double value, DType dtype = DType::F32) {
        return make([&](fulmen_tensor** o) { return fulmen_tensor_scalar(value, static_cast<int32_t>(dtype), o); });
    }

    // ---- queries -----------------------------------------------------

    /// The element type.
    DType dtype() const { return static_cast<DType>(query<int32_t>(fulmen_tensor_dtype)); }
    /// The number of dimensions.
    size_t ndim() const { return query<size_t>(fulmen_tensor_ndim); }
    /// The number of elements.
    size_t numel() const { return query<size_t>(fulmen_tensor_numel); }
    /// The value of a one-element tensor.
    double item() const { return query<double>(fulmen_tensor_item); }
    /// Whether autograd records operations on this tensor.
    bool requires_grad() const { return query<bool>(fulmen_tensor_requires_grad); }
    /// Whether the tensor is in pinned host memory (a `pin_memory` loader's
    /// batch where CUDA is available).
    bool is_pinned() const { return query<bool>(fulmen_tensor_is_pinned); }

    /// The sizes of every dimension.
    Shape shape() const {
        Shape dims(ndim());
        size_t n = 0;
        check(fulmen_tensor_shape(get(), dims.data(), dims.size(), &n));
        dims.resize(n);
        return dims;
    }

    /// The device the tensor lives on.
    Device device() const {
        int32_t type = 0;
        int64_t index = 0;
        check(fulmen_tensor_device(get(), &type, &index));
        return {static_cast<DeviceType>(type), index};
    }

    /// The address of the first element of a contiguous tensor: device
    /// memory on a device (fulmen_tensor_data_ptr), valid while the storage
    /// lives and the tensor is not resized.
    void* data_ptr() const {
        void* out = nullptr;
        check(fulmen_tensor_data_ptr(get(), &out));
        return out;
    }

    /// Copies the elements, converted to `dtype`, into `dst` (`nbytes` long).
    void copy_to(DType dtype, void* dst, size_t nbytes) const {
        check(fulmen_tensor_copy_to(get(), static_cast<int32_t>(dtype), dst, nbytes));
    }

    /// The elements, converted to `T`, row-major.
    template <class T>
    std::vector<T> to_vector() const {
        if constexpr (std::is_same_v<T, bool>) {
            std::vector<uint8_t> bytes = to_vector<uint8_t>(DType::Bool);
            return std::vector<bool>(bytes.begin(), bytes.end());
        } else {
            return to_vector<T>(dtype_of<T>);
        }
    }

    // ---- autograd and conversions --------------------------------------

    /// Turns gradient recording on or off (leaf tensors); returns *this.
    Tensor& set_requires_grad(bool on = true) {
        check(fulmen_tensor_set_requires_grad(get(), on));
        return *this;
    }
    /// Backpropagates from this one-element tensor (a loss).
    void backward() const { check(fulmen_tensor_backward(get())); }
    /// The accumulated gradient, or nullopt when there is none yet.
    std::optional<Tensor> grad() const {
        Tensor g = unary(fulmen_tensor_grad);
        if (!g) return std::nullopt;
        return g;
    }
    /// A new handle to the same tensor (shared storage and history).
    Tensor share() const { return unary(fulmen_tensor_share); }
    /// A copy with its own storage (autograd-tracked).
    Tensor clone() const { return unary(fulmen_tensor_clone); }
    /// The same data cut off from autograd.
    Tensor detach() const { return unary(fulmen_tensor_detach); }
    /// Converted to another element type.
    Tensor to(DType dtype) const {
        return make([&](fulmen_tensor** o) { return fulmen_tensor_to_dtype(get(), static_cast<int32_t>(dtype), o); });
    }
    /// Copied to another device.
    Tensor to(Device device) const {
        return make([&](fulmen_tensor** o) {
            return fulmen_tensor_to_device(get(), static_cast<int32_t>(device.type), device.index, o);
        });
    }

    // ---- elementwise math (the rest is generated, below) ----------------

    /// `this - value`: `add(-value)`.
    Tensor sub(double value) const { return add(-value); }
    /// `this / value` (true division by a 0-dimensional f64 tensor).
    Tensor div(double value) const { return div(scalar(value, DType::F64)); }

    // ---- comparisons (bool results) --------------------------------------

    /// `this <op> other`, broadcasting.
    Tensor compare(const Tensor& other, Compare op) const {
        return make([&](fulmen_tensor** o) { return fulmen_tensor_compare(get(), other.get(), static_cast<int32_t>(op), o); });
    }
    /// `this <op> value`.
    Tensor compare(double value, Compare op) const {
        return make([&](fulmen_tensor** o) { return fulmen_tensor_compare_scalar(get(), value, static_cast<int32_t>(op), o); });
    }
    /// `this == other`.
    Tensor eq(const Tensor& other) const { return compare(other, Compare::Eq); }
    /// `this != other`.
    Tensor ne(const Tensor& other) const { return compare(other, Compare::Ne); }
    /// `this < other`.
    Tensor lt(const Tensor& other) const { return compare(other, Compare::Lt); }
    /// `this <= other`.
    Tensor le(const Tensor& other) const { return compare(other, Compare::Le); }
    /// `this > other`.
    Tensor gt(const Tensor& other) const { return compare(other, Compare::Gt); }
    /// `this >= other`.
    Tensor ge(const Tensor& other) const { return compare(other, Compare::Ge); }
    /// `this == value`.
    Tensor eq(double value) const { return compare(value, Compare::Eq); }
    /// `this != value`.
    Tensor ne(double value) const { return compare(value, Compare::Ne); }
    /// `this < value`.
    Tensor lt(double value) const { return compare(value, Compare::Lt); }
    /// `this <= value`.
    Tensor le(double value) const { return compare(value, Compare::Le); }
    /// `this > value`.
    Tensor gt(double value) const { return compare(value, Compare::Gt); }
    /// `this >= value`.
    Tensor ge(double value) const { return compare(value, Compare::Ge); }

    // ---- indexing --------------------------------------------------------

    /// Entries along `dim` at the positions in the 1-D integer `index`.
    Tensor index_select(int64_t dim, const Tensor& index) const { return indexed(fulmen_tensor_index_select, dim, index); }
    /// Values gathered along `dim` (torch.gather).
    Tensor gather(int64_t dim, const Tensor& index) const { return indexed(fulmen_tensor_gather, dim, index); }

    /// Wraps a C call `fn(&out)` that makes a tensor (for binding authors).
    template <class Fn>
    static Tensor make(Fn&& fn) {
        return adopt(detail::make<fulmen_tensor>(std::forward<Fn>(fn)));
    }

    /// Wraps a C call `fn(&first, &second)` that makes two tensors.
    template <class Fn>
    static std::pair<Tensor, Tensor> make_pair(Fn&& fn) {
        fulmen_tensor* a = nullptr;
        fulmen_tensor* b = nullptr;
        check(fn(&a, &b));
        Tensor first(a);
        Tensor second(b);
        check(fulmen_tensor_keep(a));
        check(fulmen_tensor_keep(b));
        return {std::move(first), std::move(second)};
    }

    /// The handle of an optional tensor argument: NULL for nullptr; throws
    /// INVALID_ARGUMENT for an empty (moved-from) Tensor, which is not "left out".
    static const fulmen_tensor* optional_handle(const Tensor* t, const char* name) {
        if (t != nullptr && !*t) {
            throw Error(FULMEN_CODE_INVALID_ARGUMENT, std::string("argument `") + name + "` is an empty Tensor");
        }
        return t != nullptr ? t->get() : nullptr;
    }

    /// Wraps a C call `fn(outs, capacity, &count)` that makes several
    /// tensors, growing the array once when the call reports more.
    template <class Fn>
    static std::vector<Tensor> make_list(Fn&& fn) {
        // The result's room is reserved before each call, so nothing can
        // throw between the C call making handles and their owners.
        std::vector<fulmen_tensor*> slots(16, nullptr);
        std::vector<Tensor> out;
        out.reserve(slots.size());
        size_t count = 0;
        fulmen_error* err = fn(slots.data(), slots.size(), &count);
        // A count beyond 2^24 (an empty tensor in 2^40 chunks) stays the
        // op's OUT_OF_RANGE error instead of a huge allocation here.
        if (err != nullptr && fulmen_error_code(err) == FULMEN_CODE_OUT_OF_RANGE && count > slots.size() &&
            count <= (size_t{1} << 24)) {
            fulmen_error_free(err);
            slots.assign(count, nullptr);
            out.reserve(count);
            err = fn(slots.data(), slots.size(), &count);
        }
        check(err);
        for (size_t i = 0; i < count; ++i) out.push_back(Tensor(slots[i]));
        for (const Tensor& t : out) check(fulmen_tensor_keep(t.get()));
        return out;
    }

    // ---- generated ops (src/tensor/ops/table.rs): arithmetic, math,
    // activations, reductions, shapes, selection, and the in-place ops
    // under no_grad (parameters, buffers, EMA copies) ----------------------

#include "tensor_methods_gen.inc"

private:
    explicit Tensor(fulmen_tensor* owned) noexcept : Handle(owned) {}

    using Unary = fulmen_error* (*)(const fulmen_tensor*, fulmen_tensor**);
    using Indexed = fulmen_error* (*)(const fulmen_tensor*, int64_t, const fulmen_tensor*, fulmen_tensor**);
    using Filled = fulmen_error* (*)(const int64_t*, size_t, int32_t, fulmen_tensor**);

    template <class V, class Fn>
    V query(Fn fn) const {
        return detail::read<V>([&](V* out) { return fn(get(), out); });
    }
    template <class T>
    std::vector<T> to_vector(DType as) const {
        std::vector<T> out(numel());
        if (!out.empty()) copy_to(as, out.data(), out.size() * sizeof(T));
        return out;
    }
    static Tensor filled(Filled fn, const Shape& shape, DType dtype) {
        return make([&](fulmen_tensor** o) { return fn(shape.data(), shape.size(), static_cast<int32_t>(dtype), o); });
    }
    Tensor unary(Unary fn) const {
        return make([&](fulmen_tensor** o) { return fn(get(), o); });
    }
    Tensor indexed(Indexed fn, int64_t dim, const Tensor& index) const {
        return make([&](fulmen_tensor** o) { return fn(get(), dim, index.get(), o); });
    }
};

namespace detail {

template <class Range>
std::vector<const fulmen_tensor*> handles(const Range& tensors) {
    std::vector<const fulmen_tensor*> out;
    for (const auto& t : tensors) out.push_back(static_cast<const Tensor&>(t).get());
    return out;
}

using JoinFn = fulmen_error* (*)(const fulmen_tensor* const*, size_t, int64_t, fulmen_tensor**);

template <class Range>
Tensor join(JoinFn fn, const Range& tensors, int64_t dim) {
    std::vector<const fulmen_tensor*> h = handles(tensors);
    return Tensor::make([&](fulmen_tensor** o) { return fn(h.data(), h.size(), dim, o); });
}

}  // namespace detail

// cat and stack of a braced list (`cat({a, b}, 0)`) are generated; these
// take any container of tensors (e.g. std::vector<Tensor>).

/// Concatenates a container of tensors (e.g. std::vector<Tensor>) along `dim`.
template <class Range>
Tensor cat(const Range& tensors, int64_t dim = 0) {
    return detail::join(fulmen_tensor_cat, tensors, dim);
}
/// Stacks a container of tensors (e.g. std::vector<Tensor>) along `dim`.
template <class Range>
Tensor stack(const Range& tensors, int64_t dim = 0) {
    return detail::join(fulmen_tensor_stack, tensors, dim);
}

#include "tensor_functions_gen.inc"

/// `a + b`.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return a.add(b); }
/// `a - b`.
inline Tensor operator-(const Tensor& a, const Tensor& b) { return a.sub(b); }
/// `a * b` elementwise.
inline Tensor operator*(const Tensor& a, const Tensor& b) { return a.mul(b); }
/// `a / b` elementwise.
inline Tensor operator/(const Tensor& a, const Tensor& b) { return a.div(b); }
/// `a + s`.
inline Tensor operator+(const Tensor& a, double s) { return a.add(s); }
/// `a - s`.
inline Tensor operator-(const Tensor& a, double s) { return a.sub(s); }
/// `a * s`.
inline Tensor operator*(const Tensor& a, double s) { return a.mul(s); }
/// `a / s`.
inline Tensor operator/(const Tensor& a, double s) { return a.div(s); }
/// `s + a`.
inline Tensor operator+(double s, const Tensor& a) { return a.add(s); }
/// `s - a`.
inline Tensor operator-(double s, const Tensor& a) { return a.neg().add(s); }
/// `s * a`.
inline Tensor operator*(double s, const Tensor& a) { return a.mul(s); }
/// `s / a`.
inline Tensor operator/(double s, const Tensor& a) { return Tensor::scalar(s, DType::F64).div(a); }
/// `-a`.
inline Tensor operator-(const Tensor& a) { return a.neg(); }

/// Loss functions (torch.nn.functional semantics).
namespace loss {

#include "tensor_losses_gen.inc"

}  // namespace loss

}  // namespace fulmen
