/*
 * Writing `torch.save` archives in the C tests and fuzz targets: a zip of
 * stored (uncompressed) records with their CRC-32, as PyTorch writes them,
 * so a crafted `data.pkl` reaches the unpickler instead of failing the zip
 * checks.
 */
#ifndef FULMEN_TEST_TORCH_ZIP_H
#define FULMEN_TEST_TORCH_ZIP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most records torch_zip_write takes. */
#define TORCH_ZIP_MAX_RECORDS 32

static inline uint32_t torch_zip_crc32(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static inline void torch_zip_put16(FILE *f, unsigned v) {
    fputc((int)(v & 0xFF), f);
    fputc((int)((v >> 8) & 0xFF), f);
}

static inline void torch_zip_put32(FILE *f, uint32_t v) {
    torch_zip_put16(f, v & 0xFFFF);
    torch_zip_put16(f, v >> 16);
}

/* The fields local and central headers share: version needed, flags,
 * method (stored), time, date, CRC, sizes and the name's length. */
static inline void torch_zip_put_entry(FILE *f, uint32_t crc, size_t size, const char *name) {
    torch_zip_put16(f, 20);
    torch_zip_put16(f, 0);
    torch_zip_put16(f, 0);
    torch_zip_put32(f, 0);
    torch_zip_put32(f, crc);
    torch_zip_put32(f, (uint32_t)size);
    torch_zip_put32(f, (uint32_t)size);
    torch_zip_put16(f, (unsigned)strlen(name));
}

/* Writes a stored zip of the `n` records `names[i]` holding `data[i]`
 * (`sizes[i]` bytes, under 4 GiB) to `f`; aborts past
 * TORCH_ZIP_MAX_RECORDS. */
static inline void torch_zip_write(FILE *f, const char *const *names, const uint8_t *const *data,
                                   const size_t *sizes, int n) {
    uint32_t offsets[TORCH_ZIP_MAX_RECORDS], crcs[TORCH_ZIP_MAX_RECORDS];
    if (n < 0 || n > TORCH_ZIP_MAX_RECORDS) abort();
    for (int i = 0; i < n; i++) {
        offsets[i] = (uint32_t)ftell(f);
        crcs[i] = torch_zip_crc32(data[i], sizes[i]);
        torch_zip_put32(f, 0x04034b50);
        torch_zip_put_entry(f, crcs[i], sizes[i], names[i]);
        torch_zip_put16(f, 0); /* extra */
        fputs(names[i], f);
        if (sizes[i] > 0) fwrite(data[i], 1, sizes[i], f);
    }
    uint32_t cd = (uint32_t)ftell(f);
    for (int i = 0; i < n; i++) {
        torch_zip_put32(f, 0x02014b50);
        torch_zip_put16(f, 20); /* made by */
        torch_zip_put_entry(f, crcs[i], sizes[i], names[i]);
        torch_zip_put32(f, 0); /* extra, comment */
        torch_zip_put32(f, 0); /* disk, internal attributes */
        torch_zip_put32(f, 0); /* external attributes */
        torch_zip_put32(f, offsets[i]);
        fputs(names[i], f);
    }
    uint32_t cd_size = (uint32_t)ftell(f) - cd;
    torch_zip_put32(f, 0x06054b50);
    torch_zip_put32(f, 0);
    torch_zip_put16(f, (unsigned)n);
    torch_zip_put16(f, (unsigned)n);
    torch_zip_put32(f, cd_size);
    torch_zip_put32(f, cd);
    torch_zip_put16(f, 0);
}

/* Writes a `torch.save` archive at `path` whose pickle is `pickle`
 * (`size` bytes), with the byte order and version records PyTorch adds;
 * returns 0, or -1 when the file cannot be written. */
static inline int torch_zip_save(const char *path, const uint8_t *pickle, size_t size) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    const char *names[3] = {"archive/data.pkl", "archive/byteorder", "archive/version"};
    const uint8_t *data[3] = {pickle, (const uint8_t *)"little", (const uint8_t *)"3\n"};
    size_t sizes[3] = {size, 6, 2};
    torch_zip_write(f, names, data, sizes, 3);
    return fclose(f) == 0 ? 0 : -1;
}

#endif
