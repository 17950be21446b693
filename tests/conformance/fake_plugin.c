/*
 * A conformance plugin, as a vendor writes one: `fulmen_conformance_setup`
 * makes the vendor's device type available (here fulmen's fake device,
 * under the name "npu"; a vendor loads its own backend instead) and
 * registers the accelerator to check ("vendor_npu"), with a collectives
 * hook for DDP (store_collectives.h; a vendor's calls its own
 * communication library). It also registers
 * "broken_xpu", whose devices are XPU devices this process has no backend
 * for: the conformance program must fail it.
 *
 *   fulmen_conformance --plugin ./libfake_plugin.so --accelerator vendor_npu
 */
#include <fulmen.h>

#include "store_collectives.h"

#include <string.h>

static fulmen_error *count(void *ud, size_t *out) {
    (void)ud;
    return fulmen_device_count(FULMEN_DEVICE_TYPE_PRIVATE_USE1, out);
}

static fulmen_error *devices(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = FULMEN_DEVICE_TYPE_PRIVATE_USE1;
        out[i].index = ids[i];
    }
    return NULL;
}

static fulmen_error *xpu_devices(void *ud, const int64_t *ids, size_t n, fulmen_device *out) {
    (void)ud;
    for (size_t i = 0; i < n; i++) {
        out[i].device_type = FULMEN_DEVICE_TYPE_XPU;
        out[i].index = ids[i];
    }
    return NULL;
}

fulmen_error *fulmen_conformance_setup(void);

fulmen_error *fulmen_conformance_setup(void) {
    fulmen_error *e = fulmen_fake_device_register("npu", 2);
    if (e != NULL) return e;
    fulmen_accelerator_vtable vt;
    memset(&vt, 0, sizeof vt);
    vt.struct_size = sizeof vt;
    vt.auto_device_count = count;
    vt.get_parallel_devices = devices;
    fulmen_collectives collectives = store_collectives_table(); /* copied by the registration */
    vt.collectives = &collectives;
    e = fulmen_accelerator_register("vendor_npu", "a vendor's accelerator over a PrivateUse1 backend", &vt, false);
    if (e != NULL) return e;
    vt.collectives = NULL;
    vt.auto_device_count = NULL; /* one device */
    vt.get_parallel_devices = xpu_devices;
    return fulmen_accelerator_register("broken_xpu", "claims XPU devices without an XPU backend", &vt, false);
}
