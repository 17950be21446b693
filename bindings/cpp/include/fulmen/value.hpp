// fulmen C++ binding: values of TorchScript methods (fulmen_value).
#pragma once

#include "tensor.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace fulmen {

/// The kind of a Value (the C `fulmen_value_kind`).
enum class ValueKind : int32_t {
    None = FULMEN_VALUE_KIND_NONE,
    Bool = FULMEN_VALUE_KIND_BOOL,
    Int = FULMEN_VALUE_KIND_INT,
    Double = FULMEN_VALUE_KIND_DOUBLE,
    String = FULMEN_VALUE_KIND_STRING,
    Tensor = FULMEN_VALUE_KIND_TENSOR,
    Tuple = FULMEN_VALUE_KIND_TUPLE,
    List = FULMEN_VALUE_KIND_LIST,
    Dict = FULMEN_VALUE_KIND_DICT,
};

/// What a TorchScript method takes and returns: a tensor, None, bool, int,
/// float, string, or a tuple, list or dict of values. Immutable; owns its
/// handle (kept out of callback scopes, like Tensor).
class Value : public detail::Handle<fulmen_value, fulmen_value_free> {
public:
    /// An empty object (no handle).
    Value() = default;

    /// Takes ownership of a handle from the C API. NULL gives an empty Value.
    static Value adopt(fulmen_value* handle) {
        Value v(handle);
        if (handle != nullptr) check(fulmen_value_keep(handle));
        return v;
    }

    /// None.
    static Value none() { return make([](fulmen_value** o) { return fulmen_value_none(o); }); }
    /// A bool.
    static Value of_bool(bool v) { return make([&](fulmen_value** o) { return fulmen_value_bool(v, o); }); }
    /// An int (64-bit).
    static Value of_int(int64_t v) { return make([&](fulmen_value** o) { return fulmen_value_int(v, o); }); }
    /// A float (64-bit).
    static Value of_double(double v) { return make([&](fulmen_value** o) { return fulmen_value_double(v, o); }); }
    /// A string (UTF-8).
    static Value of_string(const std::string& v) {
        return make([&](fulmen_value** o) { return fulmen_value_string(v.c_str(), o); });
    }
    /// A tensor (sharing its storage).
    static Value of_tensor(const Tensor& t) {
        return make([&](fulmen_value** o) { return fulmen_value_tensor(t.get(), o); });
    }
    /// A tuple of copies of `items` (none may be null).
    static Value tuple(const std::vector<const Value*>& items) {
        auto hs = handles(items, "items");
        return make([&](fulmen_value** o) { return fulmen_value_tuple(hs.data(), hs.size(), o); });
    }
    /// A list of copies of `items`, typed by their common type.
    static Value list(const std::vector<const Value*>& items) {
        auto hs = handles(items, "items");
        return make([&](fulmen_value** o) { return fulmen_value_list(hs.data(), hs.size(), o); });
    }
    /// A dict {key: value} in the given order, with string keys.
    static Value dict(const std::vector<std::pair<std::string, const Value*>>& entries) {
        std::vector<Value> keys;
        std::vector<const Value*> key_ptrs, values;
        keys.reserve(entries.size());
        for (const auto& e : entries) {
            keys.push_back(of_string(e.first));
            values.push_back(e.second);
        }
        for (const Value& k : keys) key_ptrs.push_back(&k);
        return dict(key_ptrs, values);
    }
    /// A dict {keys[i]: values[i]}; keys all strings, ints, floats or bools.
    static Value dict(const std::vector<const Value*>& keys, const std::vector<const Value*>& values) {
        if (keys.size() != values.size()) {
            throw Error(FULMEN_CODE_INVALID_ARGUMENT, "Value::dict: keys and values differ in length");
        }
        auto ks = handles(keys, "keys");
        auto vs = handles(values, "values");
        return make([&](fulmen_value** o) { return fulmen_value_dict(ks.data(), vs.data(), ks.size(), o); });
    }
    /// The tuple of a batch's tensors (the `batch` of a scripted training_step).
    static Value from_batch(const fulmen_batch* batch) {
        return make([&](fulmen_value** o) { return fulmen_value_from_batch(batch, o); });
    }

    /// The kind of value.
    ValueKind kind() const { return static_cast<ValueKind>(read<int32_t>(fulmen_value_get_kind)); }
    /// A bool value.
    bool to_bool() const { return read<bool>(fulmen_value_get_bool); }
    /// An int value.
    int64_t to_int() const { return read<int64_t>(fulmen_value_get_int); }
    /// A float value (an int is converted).
    double to_double() const { return read<double>(fulmen_value_get_double); }
    /// A string value.
    std::string to_string() const {
        return detail::read_string(
            [&](char* buf, size_t cap, size_t* len) { return fulmen_value_get_string(get(), buf, cap, len); });
    }
    /// A tensor value's tensor (sharing storage and autograd history).
    Tensor to_tensor() const {
        return Tensor::make([&](fulmen_tensor** o) { return fulmen_value_get_tensor(get(), o); });
    }
    /// Elements of a tuple or list, entries of a dict.
    size_t size() const { return read<size_t>(fulmen_value_len); }
    /// Element `index` of a tuple or list.
    Value operator[](size_t index) const {
        return make([&](fulmen_value** o) { return fulmen_value_item(get(), index, o); });
    }
    /// The value of a dict's string key.
    Value at(const std::string& key) const {
        return make([&](fulmen_value** o) { return fulmen_value_dict_get(get(), key.c_str(), o); });
    }
    /// Key and value of a dict's entry `index`.
    std::pair<Value, Value> entry(size_t index) const {
        fulmen_value* k = nullptr;
        fulmen_value* v = nullptr;
        check(fulmen_value_dict_entry(get(), index, &k, &v));
        Value key(k);
        Value value(v);
        check(fulmen_value_keep(k));
        check(fulmen_value_keep(v));
        return {std::move(key), std::move(value)};
    }

    /// The C handles of `items` (a null item throws INVALID_ARGUMENT).
    static std::vector<const fulmen_value*> handles(const std::vector<const Value*>& items, const char* what) {
        std::vector<const fulmen_value*> out;
        out.reserve(items.size());
        for (const Value* v : items) {
            if (v == nullptr || !*v) throw Error(FULMEN_CODE_INVALID_ARGUMENT, std::string(what) + ": a null or empty Value");
            out.push_back(v->get());
        }
        return out;
    }

private:
    explicit Value(fulmen_value* owned) noexcept : Handle(owned) {}

    template <class Fn>
    static Value make(Fn&& fn) {
        return adopt(detail::make<fulmen_value>(std::forward<Fn>(fn)));
    }
    template <class V, class Fn>
    V read(Fn fn) const {
        return detail::read<V>([&](V* out) { return fn(get(), out); });
    }
};

}  // namespace fulmen
