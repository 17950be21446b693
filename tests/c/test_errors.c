/*
 * Errors, version, process settings and handle checking: the conventions
 * every other function relies on.
 */
#include "check.h"

/* fulmen_error_new / code / message / free, including bad input. */
static void test_error_object(void) {
    fulmen_error *e = fulmen_error_new(FULMEN_CODE_IO, "disk on fire");
    CHECK(e != NULL);
    CHECK(fulmen_error_code(e) == FULMEN_CODE_IO);
    CHECK(strcmp(fulmen_error_message(e), "disk on fire") == 0);
    fulmen_error_free(e);
    fulmen_error_free(e); /* double free: ignored */
    fulmen_error_free(NULL);
    CHECK(fulmen_error_code(NULL) == 0);
    CHECK(strcmp(fulmen_error_message(NULL), "") == 0);
    CHECK(fulmen_error_code(e) == 0); /* freed */

    e = fulmen_error_new(12345, NULL); /* unknown code, NULL message */
    CHECK(fulmen_error_code(e) == FULMEN_CODE_CALLBACK);
    CHECK(strcmp(fulmen_error_message(e), "") == 0);
    fulmen_error_free(e);
}

/* Version strings and macros agree; the libtorch version is the one built
 * against (FULMEN_EXPECT_LIBTORCH, default 2.13.0). */
static void test_version(void) {
    CHECK(strcmp(fulmen_version(), FULMEN_VERSION_STRING) == 0);
    const char *want = getenv("FULMEN_EXPECT_LIBTORCH");
    if (want == NULL) want = "2.13.0";
    if (strcmp(fulmen_libtorch_version(), want) != 0)
        fprintf(stderr, "libtorch version %s, expected %s\n", fulmen_libtorch_version(), want);
    CHECK(strcmp(fulmen_libtorch_version(), want) == 0);
    CHECK(FULMEN_VERSION_MAJOR == 0);
}

/* The library serves this header; a newer header of its series, or any
 * header of another series, is refused with both versions named. */
static void test_abi_check(void) {
    CHECK(fulmen_abi_version() == FULMEN_ABI_VERSION);
    CHECK_OK(fulmen_abi_check(FULMEN_ABI_VERSION));
    if (FULMEN_VERSION_PATCH > 0) CHECK_OK(fulmen_abi_check(FULMEN_ABI_VERSION - 1));
    const uint32_t refused[] = {
        FULMEN_ABI_VERSION + 1,       /* a newer patch of the same series */
        FULMEN_ABI_VERSION + 1000,    /* the next 0.MINOR */
        FULMEN_ABI_VERSION + 1000000, /* the next major */
        0,                            /* 0.0.0 */
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        fulmen_error *e = fulmen_abi_check(refused[i]);
        CHECK(fulmen_error_code(e) == FULMEN_CODE_UNSUPPORTED);
        CHECK(strstr(fulmen_error_message(e), FULMEN_VERSION_STRING) != NULL);
        fulmen_error_free(e);
    }
    CHECK(strncmp(FULMEN_SONAME, "libfulmen.so.", 13) == 0);
}

/* Seeding makes random tensors repeat; thread counts are validated. */
static void test_runtime(void) {
    int64_t shape[1] = {4};
    fulmen_tensor *a = NULL, *b = NULL;
    float va[4], vb[4];
    CHECK_OK(fulmen_manual_seed(123));
    CHECK_OK(fulmen_tensor_randn(shape, 1, FULMEN_DTYPE_F32, &a));
    CHECK_OK(fulmen_manual_seed(123));
    CHECK_OK(fulmen_tensor_randn(shape, 1, FULMEN_DTYPE_F32, &b));
    CHECK_OK(fulmen_tensor_copy_to(a, FULMEN_DTYPE_F32, va, sizeof va));
    CHECK_OK(fulmen_tensor_copy_to(b, FULMEN_DTYPE_F32, vb, sizeof vb));
    CHECK(memcmp(va, vb, sizeof va) == 0);
    fulmen_tensor_free(a);
    fulmen_tensor_free(b);

    int32_t before = fulmen_get_num_threads();
    CHECK(before >= 1);
    CHECK_OK(fulmen_set_num_threads(1));
    CHECK(fulmen_get_num_threads() == 1);
    CHECK_ERR(fulmen_set_num_threads(0), FULMEN_CODE_INVALID_ARGUMENT, "at least 1");
    CHECK_OK(fulmen_set_num_threads(before));
}

/* NULL, freed and wrong-type handles are errors, never crashes. */
static void test_handle_checks(void) {
    int64_t shape[1] = {2};
    float v[2] = {1, 2};
    fulmen_tensor *t = check_f32(v, 2, shape, 1), *out = NULL;
    size_t live = fulmen_live_handles();
    CHECK(live >= 1);
    CHECK_ERR(fulmen_tensor_relu(NULL, &out), FULMEN_CODE_NULL_ARGUMENT, "`x`");
    CHECK_ERR(fulmen_tensor_relu(t, NULL), FULMEN_CODE_NULL_ARGUMENT, "`out`");
    fulmen_model *m = NULL;
    CHECK_OK(fulmen_model_sequential_new(&m));
    CHECK_ERR(fulmen_tensor_relu((const fulmen_tensor *)m, &out), FULMEN_CODE_INVALID_HANDLE, "fulmen_model");
    CHECK_ERR(fulmen_model_forward((const fulmen_model *)t, t, &out), FULMEN_CODE_INVALID_HANDLE, "fulmen_tensor");
    int not_a_handle = 0;
    CHECK_ERR(fulmen_tensor_relu((const fulmen_tensor *)&not_a_handle, &out), FULMEN_CODE_INVALID_HANDLE, "never created");
    fulmen_tensor_free(t);
    CHECK_ERR(fulmen_tensor_relu(t, &out), FULMEN_CODE_INVALID_HANDLE, "freed");
    CHECK(out == NULL); /* outputs are written only on success */
    fulmen_tensor_free(t);
    fulmen_model_free(m);
    fulmen_model_free(m);
    CHECK(fulmen_live_handles() == live - 1);
    /* Errors name the function that failed. */
    fulmen_error *e = fulmen_tensor_relu(NULL, &out);
    CHECK(strstr(fulmen_error_message(e), "fulmen_tensor_relu") != NULL);
    fulmen_error_free(e);
}

int main(void) {
    test_error_object();
    test_version();
    test_abi_check();
    test_runtime();
    test_handle_checks();
    return check_finish("test_errors");
}
