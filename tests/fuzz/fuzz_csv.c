/*
 * Fuzz target: the CSV / CSV.gz reader (`fulmen_dataset_from_csv`) on
 * mutated files. The input is the file (gzip when it starts with gzip's
 * magic bytes); its length picks the options (labels or not, which label
 * column, header rule, delimiter, scaling). A file that loads must give
 * rows that can be read back; one that does not must give a clear error.
 */
#define _XOPEN_SOURCE 700

#include "fulmen.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

const char *fuzz_target_name = "csv";

static const char *const plain_seeds[] = {
    "a,b,label\n1,2,0\n3,4,1\n5,6,1\n",
    "label,x0,x1,x2\n0,0.5,1e3,-2\n1,7,8,9\n",
    "1;2;3\n4;5;6\n",
    "x,y\n\"1\",2\n3,\"4\"\n\n",
    "0,255,128\n1,0,64\n2,12,250\n",
};

void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    for (size_t i = 0; i < sizeof plain_seeds / sizeof *plain_seeds; i++) {
        add((const uint8_t *)plain_seeds[i], strlen(plain_seeds[i]));
        /* The same rows gzipped (gzip is part of every Debian system). */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "printf '%%s' '%s' | gzip -c", plain_seeds[i]);
        FILE *p = popen(cmd, "r");
        if (p == NULL) continue;
        uint8_t buf[512];
        size_t n = fread(buf, 1, sizeof buf, p);
        if (pclose(p) == 0 && n > 0) add(buf, n);
    }
}

static unsigned long inputs, parsed;

void fuzz_report(void) { printf("fuzz csv: %lu inputs, %lu parsed into a dataset\n", inputs, parsed); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    char path[96];
    snprintf(path, sizeof path, "%s/input.%s", fuzz_work_dir(), gz ? "csv.gz" : "csv");
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    fclose(f);

    fulmen_csv_options o = fulmen_csv_options_default();
    o.has_labels = size % 2 == 0;
    o.label_column = (int64_t)(size % 5) - 2;
    o.header = (int32_t)(size % 3) - 1;
    o.delimiter = size % 7 == 0 ? ';' : ',';
    o.scaling = (int32_t)(size % 4);
    o.scale_divisor = size % 11 == 0 ? 0.0 : 255.0;
    size_t before = fulmen_live_handles();
    fulmen_dataset *ds = NULL;
    fulmen_error *e = fulmen_dataset_from_csv(path, &o, &ds);
    inputs++;
    parsed += e == NULL;
    if (e != NULL) {
        int32_t code = fulmen_error_code(e);
        if (ds != NULL || code < 1 || code > FULMEN_CODE_OUT_OF_MEMORY || code == FULMEN_CODE_PANIC || fulmen_error_message(e)[0] == 0) abort();
        fulmen_error_free(e);
    } else {
        size_t n = 0;
        if ((e = fulmen_dataset_len(ds, &n)) != NULL) abort();
        int64_t idx[2] = {0, (int64_t)n - 1};
        fulmen_tensor *got[2] = {NULL, NULL};
        size_t count = 0;
        if (n > 0) {
            if ((e = fulmen_dataset_get(ds, idx, 2, got, 2, &count)) != NULL) abort();
            for (size_t i = 0; i < count && i < 2; i++) fulmen_tensor_free(got[i]);
        }
        fulmen_dataset_free(ds);
    }
    unlink(path);
    if (fulmen_live_handles() != before) abort();
    return 0;
}
