/*
 * The slots of an accelerator over fulmen's fake PrivateUse1 device (see
 * fulmen_fake_device_register), shared by test_custom_device and the
 * conformance program: Lightning's XPUAccelerator example, whose
 * get_parallel_devices returns torch.device("xpu", i).
 */
#ifndef FULMEN_TEST_NPU_H
#define FULMEN_TEST_NPU_H

#include <fulmen.h>

/* auto_device_count: what the backend reports. */
static inline fulmen_error *npu_count(void *ud, size_t *out) {
    (void)ud;
    return fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, out);
}

/* Device i of `type` for id i. */
static inline void devices_of(int32_t type, const int64_t *ids, size_t n, fulmen_device *out) {
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = type;
        out[i].index = ids[i];
    }
}

/* get_parallel_devices: PrivateUse1 device i for id i. */
static inline fulmen_error *npu_parallel(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    devices_of(FULMEN_DEVICE_TYPE_PRIVATE_USE1, ids, n, out);
    return NULL;
}

/* get_parallel_devices naming XPU devices (no XPU backend here). */
static inline fulmen_error *xpu_parallel(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    devices_of(FULMEN_DEVICE_TYPE_XPU, ids, n, out);
    return NULL;
}

#endif
