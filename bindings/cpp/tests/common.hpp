// Shared helpers of the C++ binding tests: a fixture that checks for leaked
// handles after every test, a scratch folder, a small synthetic task, and
// the code / message of a thrown fulmen::Error.
#pragma once

#include <fulmen/fulmen.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace fulmen_test {

/// A folder for files the tests write, removed at the end of the run
/// (default_root_dir of quiet_options: logs and default checkpoints). A new
/// one per run (mkdtemp): never one left by an earlier run nor another
/// run's at the same time.
inline const std::filesystem::path& scratch() {
    static const std::filesystem::path dir = [] {
        std::string name = (std::filesystem::temp_directory_path() / "fulmen-cpp-test-XXXXXX").string();
        if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp " + name + " failed");
        return std::filesystem::path(name);
    }();
    return dir;
}

/// Every test ends with no live fulmen handle.
class FulmenTest : public ::testing::Test {
protected:
    void TearDown() override { EXPECT_EQ(fulmen::live_handles(), 0u) << "a fulmen handle leaked"; }
};

/// Two Gaussian blobs in 2-D: class 0 around (-2, -2), class 1 around (2, 2).
inline fulmen::Dataset blobs(int64_t n, uint64_t seed) {
    fulmen::manual_seed(seed);
    std::vector<float> centers;
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < n; i++) {
        labels.push_back(i % 2);
        float c = (i % 2) != 0 ? 2.0f : -2.0f;
        centers.insert(centers.end(), {c, c});
    }
    fulmen::Tensor x = fulmen::Tensor::randn({n, 2}) + fulmen::Tensor::from_vector(centers, {n, 2});
    fulmen::Tensor y = fulmen::Tensor::from_vector(labels);
    return fulmen::Dataset::from_tensors({x, y});
}

/// A 2-16-2 MLP.
inline fulmen::Model mlp() {
    using fulmen::Model;
    return Model::sequential({Model::linear(2, 16), Model::tanh(), Model::linear(16, 2)});
}

/// Trainer options for quick, quiet runs under the scratch folder.
inline fulmen::TrainerOptions quiet_options(int64_t epochs) {
    return fulmen::TrainerOptions()
        .set("max_epochs", epochs)
        .set("default_root_dir", scratch().string())
        .set("enable_progress_bar", false)
        .set("enable_model_summary", false)
        .set("log_every_n_steps", 5)
        .set("seed", 3);
}

/// A fresh, empty folder `name` under the scratch folder.
inline std::string fresh_dir(const std::string& name) {
    std::filesystem::path p = scratch() / name;
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    return p.string();
}

/// The code of the fulmen::Error `f` throws (fails the test otherwise).
template <class F>
fulmen::Code error_code(F&& f) {
    try {
        f();
    } catch (const fulmen::Error& e) {
        return e.code();
    }
    ADD_FAILURE() << "no fulmen::Error thrown";
    return static_cast<fulmen::Code>(0);
}

/// The message of the fulmen::Error `f` throws.
template <class F>
std::string error_message(F&& f) {
    try {
        f();
    } catch (const fulmen::Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no fulmen::Error thrown";
    return "";
}

/// Defined in test_odr_second_tu.cpp: a tensor made in another translation unit.
fulmen::Tensor tensor_from_second_tu(float value);

/// Defined in test_odr_second_tu.cpp: a module whose steps live in another TU.
fulmen::LightningModule module_from_second_tu(const fulmen::Model& model, int* freed);

}  // namespace fulmen_test
