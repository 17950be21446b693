/*
 * Fuzz target: the pickle reader of `torch.save` files. Each input is the
 * `data.pkl` record of an archive this target builds around it (stored
 * records with their CRC, beside a 64-byte float32 storage record "0"), so
 * mutations reach the unpickler instead of failing the zip checks. The
 * archive is loaded into a Linear(2, 2) with `fulmen_model_load` (not
 * strict): an error or a load, never a crash, a hang or a leaked handle;
 * on failure the weights are unchanged. The same archive is then the
 * ckpt_path of a validation run of a Linear(4, 4), which reads it as a
 * Lightning checkpoint (loops, optimizer and scheduler states, callbacks):
 * again an error or a run. The seeds are state_dict pickles as
 * `torch.save` writes them, a checkpoint-like nested dict, and the pickle
 * of a Lightning checkpoint fulmen writes at start-up (a fit of the
 * Linear(4, 4) with SGD and StepLR), whose other storage records every
 * archive carries; its storage "0", the 16-float weight, is the one the
 * other seeds view.
 *
 * An input that starts with 0xFF is a program with runs (see
 * expand_runs): a few bytes stand for a million MEMOIZEs, BINPUTs,
 * BINGETs, DUPs or MARKs, which the 1 MiB inputs could not hold, so the
 * reader's bounds on its memo, its open MARKs and the values it makes are
 * reached; the memo-heavy seeds are such programs.
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
#include "../c/torch_zip.h"

const char *fuzz_target_name = "pickle";

static void check_error(fulmen_error *e) { fuzz_check_error_("pickle", e); }

/* A tensor of the storage "0" (16 floats): offset, size and stride. */
#define TENSOR(size, stride)                                                                                    \
    "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x00" \
    "0X\x03\x00\x00\x00" "cpuK\x10tQK\x00" size stride "\x89" "ccollections\nOrderedDict\n)RtR"

static const char seed_state_dict[] = "\x80\x02" "ccollections\nOrderedDict\n)R(X\x06\x00\x00\x00weight" TENSOR(
    "(K\x02K\x02t", "(K\x02K\x01t") "X\x04\x00\x00\x00" "bias" TENSOR("(K\x02t", "(K\x01t") "u.";
static const char seed_checkpoint[] =
    "\x80\x02}(X\x05\x00\x00\x00" "epochK\x03"
    /* bytes and sets: protocol 2's _codecs.encode and set([...]), and the
     * opcodes of protocols 3 and 4 */
    "X\x04\x00\x00\x00" "blobc_codecs\nencode\nX\x02\x00\x00\x00" "abX\x06\x00\x00\x00" "latin1\x86R"
    "X\x04\x00\x00\x00" "tagsc__builtin__\nset\n]q\x07K\x01a\x85R"
    "X\x05\x00\x00\x00" "bytesC\x02\x00\xffX\x04\x00\x00\x00" "more\x8f(K\x07\x90"
    "X\x0a\x00\x00\x00state_dict}(X\x0c\x00\x00\x00model.weight" TENSOR(
        "(K\x02K\x02t", "(K\x02K\x01t") "X\x0a\x00\x00\x00model.bias" TENSOR("(K\x02t", "(K\x01t")
    "uX\x10\x00\x00\x00optimizer_states](}(X\x02\x00\x00\x00lrG?\xb9\x99\x99\x99\x99\x99\x9aX\x05\x00\x00\x00" "betas"
    "G?\xec\xcc\xcc\xcc\xcc\xcc\xcdG?\xef\xf7\xce\xd9\x16\x87+\x86X\x06\x00\x00\x00params](K\x00K\x01" "euaeN\x88u.";

/* Programs with runs (expand_runs): 0xFF, then pickle bytes where
 * "\xff" c n u... is the n-byte unit u repeated (c + 1) * 4096 times. */
#define RUNS_OF(count, unit) "\xff" count unit
static const char seed_memo_bomb[] = /* 2 Mi MEMOIZEs of one None */
    "\xff\x80\x04N" RUNS_OF("\xff", "\x01\x94") RUNS_OF("\xff", "\x01\x94") "0N.";
static const char seed_binput_again[] = /* 1 Mi BINPUTs of key 0, then a state_dict */
    "\xff\x80\x02N" RUNS_OF("\xff", "\x02q\x00") "0}.";
static const char seed_aliases[] = /* a list of 16 Ki Nones appended 1 Mi times through the memo */
    "\xff\x80\x02](" RUNS_OF("\x03", "\x01N") "eq\x00](" RUNS_OF("\xff", "\x02h\x00") "e\x86.";
static const char seed_marks[] = /* 4 Ki MARKs never closed */
    "\xff\x80\x02" RUNS_OF("\x00", "\x01(") ".";
static const char seed_dups[] = /* DUP, outside the safe subset */
    "\xff\x80\x02N" RUNS_OF("\x00", "\x01" "2") ".";
static const char seed_memo_lists[] = /* 64 Ki memoized empty lists in a tuple, one read back */
    "\xff\x80\x04(" RUNS_OF("\x0f", "\x02]\x94") "h\x05t.";

/* Most bytes a program with runs expands to. */
#define RUNS_LIMIT ((size_t)16 << 20)

/* The pickle a program with runs stands for (malloc'd, *out_size bytes):
 * after its first byte, 0xFF c n u[0..n) is the n-byte unit u repeated
 * (c + 1) * 4096 times, any other byte itself; at most RUNS_LIMIT bytes. */
static uint8_t *expand_runs(const uint8_t *data, size_t size, size_t *out_size) {
    size_t cap = 4096, len = 0;
    uint8_t *out = malloc(cap);
    if (out == NULL) abort();
    for (size_t i = 1; i < size;) {
        const uint8_t *unit = data + i;
        size_t n = 1, times = 1;
        if (data[i] == 0xFF && i + 2 < size) {
            times = ((size_t)data[i + 1] + 1) * 4096;
            n = data[i + 2];
            if (n > size - (i + 3)) n = size - (i + 3);
            unit = data + i + 3;
            i += 3 + n;
        } else {
            i++;
        }
        for (size_t t = 0; t < times && n > 0 && len + n <= RUNS_LIMIT; t++) {
            if (len + n > cap) {
                while (len + n > cap) cap *= 2;
                out = realloc(out, cap);
                if (out == NULL) abort();
            }
            memcpy(out + len, unit, n);
            len += n;
        }
    }
    *out_size = len;
    return out;
}

/* The validation run that reads each archive as a checkpoint. */
static struct {
    fulmen_model *model;
    fulmen_lightning_module *module;
    fulmen_trainer *trainer;
    fulmen_dataset *data;
    fulmen_loader *loader;
    /* the storage records (but "0") of the Lightning seed */
    int records;
    char names[16][32];
    uint8_t *bytes[16];
    size_t sizes[16];
} run;

static void need(fulmen_error *e) {
    if (e != NULL) {
        fprintf(stderr, "fuzz pickle: set-up failed: %s\n", fulmen_error_message(e));
        abort();
    }
}

static fulmen_error *fit_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch, fulmen_tensor **loss) {
    (void)ud;
    (void)ctx;
    fulmen_tensor *x = NULL, *y = NULL, *out = NULL;
    fulmen_error *e = fulmen_batch_get(batch, 0, &x);
    if (e == NULL) e = fulmen_batch_get(batch, 1, &y);
    if (e == NULL) e = fulmen_model_forward(run.model, x, &out);
    if (e == NULL) e = fulmen_loss_mse(out, y, FULMEN_REDUCTION_MEAN, loss);
    return e;
}

static fulmen_error *val_step(void *ud, fulmen_step_context *ctx, const fulmen_batch *batch) {
    fulmen_tensor *loss = NULL;
    return fit_step(ud, ctx, batch, &loss);
}

static fulmen_error *sgd_step_lr(void *ud, fulmen_optimizer_config *config) {
    (void)ud;
    fulmen_sgd_options o = fulmen_sgd_options_default();
    o.momentum = 0.9;
    fulmen_optimizer *opt = NULL;
    fulmen_scheduler *s = NULL;
    fulmen_error *e = fulmen_optimizer_sgd_new(run.model, NULL, 0, &o, &opt);
    if (e == NULL) e = fulmen_scheduler_step_lr_new(opt, 1, 0.5, &s);
    if (e == NULL) e = fulmen_optimizer_config_add(config, opt, s, FULMEN_INTERVAL_EPOCH, 1, NULL);
    if (e != NULL) {
        fulmen_scheduler_free(s);
        fulmen_optimizer_free(opt);
    }
    return e;
}

static void make_run(void) {
    if (run.trainer != NULL) return;
    float xs[16];
    for (int i = 0; i < 16; i++) xs[i] = (float)i / 16.0f;
    int64_t shape[2] = {4, 4};
    fulmen_tensor *x = NULL;
    need(fulmen_tensor_from_data(xs, sizeof xs, FULMEN_DTYPE_F32, shape, 2, &x));
    const fulmen_tensor *columns[2] = {x, x};
    need(fulmen_dataset_from_tensors(columns, 2, &run.data));
    fulmen_tensor_free(x);
    fulmen_loader_options lo = fulmen_loader_options_default();
    lo.batch_size = 4;
    need(fulmen_loader_new(run.data, &lo, &run.loader));
    need(fulmen_model_linear_new(4, 4, true, &run.model));
    fulmen_module_vtable vt = {.struct_size = sizeof vt,
                               .training_step = fit_step,
                               .validation_step = val_step,
                               .configure_optimizers = sgd_step_lr};
    need(fulmen_lightning_module_new(&vt, run.model, &run.module));
    fulmen_trainer_options *o = NULL;
    need(fulmen_trainer_options_new(&o));
    const char *kv[] = {"max_epochs", "1", "logger", "false", "enable_progress_bar", "false",
                        "enable_model_summary", "false", "enable_checkpointing", "false", "num_sanity_val_steps", "0",
                        "checkpoint_format", "lightning", "handle_signals", "false", NULL};
    for (int i = 0; kv[i] != NULL; i += 2) need(fulmen_trainer_options_set(o, kv[i], kv[i + 1]));
    char root[96];
    snprintf(root, sizeof root, "%s/root", fuzz_work_dir());
    need(fulmen_trainer_options_set(o, "default_root_dir", root));
    need(fulmen_trainer_new(o, &run.trainer));
    fulmen_trainer_options_free(o);
}

static uint32_t le32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* The pickle of a Lightning checkpoint of the validation run's model; its
 * storage records but "0" are kept for every archive. */
static void lightning_seed(void (*add)(const uint8_t *data, size_t size)) {
    make_run();
    char dir[96], path[160];
    snprintf(dir, sizeof dir, "%s/seed", fuzz_work_dir());
    fulmen_model_checkpoint_options mc = fulmen_model_checkpoint_options_default();
    mc.dirpath = dir;
    mc.filename = "seed";
    need(fulmen_trainer_add_model_checkpoint(run.trainer, &mc));
    need(fulmen_trainer_fit(run.trainer, run.module, run.loader, NULL, NULL));
    snprintf(path, sizeof path, "%s/seed.ckpt", dir);
    FILE *f = fopen(path, "rb");
    if (f == NULL) abort();
    static uint8_t file[1 << 16];
    size_t n = fread(file, 1, sizeof file, f);
    fclose(f);
    unlink(path);
    rmdir(dir);
    /* Stored records, each behind its local header (sizes in the header). */
    for (size_t at = 0; at + 30 <= n && le32(file + at) == 0x04034b50;) {
        uint32_t size = le32(file + at + 18);
        size_t name_len = file[at + 26] | file[at + 27] << 8, extra_len = file[at + 28] | file[at + 29] << 8;
        const char *name = (const char *)file + at + 30;
        const uint8_t *body = file + at + 30 + name_len + extra_len;
        if (body + size > file + n) abort();
        const char *slash = memchr(name, '/', name_len);
        size_t rest = slash == NULL ? 0 : name_len - (size_t)(slash + 1 - name);
        if (rest == 8 && memcmp(slash + 1, "data.pkl", 8) == 0) {
            add(body, size);
        } else if (rest > 5 && memcmp(slash + 1, "data/", 5) == 0 && !(rest == 6 && slash[6] == '0') &&
                   rest - 5 < sizeof run.names[0] && run.records < 16) {
            snprintf(run.names[run.records], sizeof run.names[0], "archive/%.*s", (int)rest, slash + 1);
            run.bytes[run.records] = malloc(size);
            if (run.bytes[run.records] == NULL) abort();
            memcpy(run.bytes[run.records], body, size);
            run.sizes[run.records++] = size;
        }
        at = (size_t)(body + size - file);
    }
}

void fuzz_seeds(void (*add)(const uint8_t *data, size_t size)) {
    add((const uint8_t *)seed_state_dict, sizeof seed_state_dict - 1);
    add((const uint8_t *)seed_checkpoint, sizeof seed_checkpoint - 1);
    const char *runs[] = {seed_memo_bomb, seed_binput_again, seed_aliases, seed_marks, seed_dups, seed_memo_lists};
    const size_t run_sizes[] = {sizeof seed_memo_bomb - 1, sizeof seed_binput_again - 1, sizeof seed_aliases - 1,
                                sizeof seed_marks - 1,     sizeof seed_dups - 1,         sizeof seed_memo_lists - 1};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) add((const uint8_t *)runs[i], run_sizes[i]);
    lightning_seed(add);
}

static unsigned long inputs, loaded, validated, expanded;

void fuzz_report(void) {
    printf("fuzz pickle: %lu inputs (%lu programs with runs), %lu loaded, %lu validated from\n", inputs, expanded,
           loaded, validated);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1u << 20)) return 0;
    char path[96];
    snprintf(path, sizeof path, "%s/input.pt", fuzz_work_dir());
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    float storage[16];
    for (int i = 0; i < 16; i++) storage[i] = (float)i * 0.5f;
    make_run();
    uint8_t *program = NULL;
    const uint8_t *pickle = data;
    size_t pickle_size = size;
    if (size > 0 && data[0] == 0xFF) {
        program = expand_runs(data, size, &pickle_size);
        pickle = program;
        expanded++;
    }
    const char *names[18] = {"archive/data.pkl", "archive/data/0"};
    const uint8_t *records[18] = {pickle, (const uint8_t *)storage};
    size_t sizes[18] = {pickle_size, sizeof storage};
    for (int i = 0; i < run.records; i++) {
        names[2 + i] = run.names[i];
        records[2 + i] = run.bytes[i];
        sizes[2 + i] = run.sizes[i];
    }
    torch_zip_write(f, names, records, sizes, 2 + run.records);
    if (fclose(f) != 0) abort();
    free(program);

    size_t before = fulmen_live_handles();
    fulmen_model *m = NULL;
    fulmen_tensor *w0 = NULL, *w1 = NULL, *d = NULL, *a = NULL, *mx = NULL;
    if (fulmen_model_linear_new(2, 2, true, &m) != NULL) abort();
    if (fulmen_model_state_dict_get(m, "weight", &w0) != NULL) abort();
    if (fulmen_tensor_clone(w0, &w1) != NULL) abort();
    fulmen_error *e = fulmen_model_load(m, path, false);
    inputs++;
    if (check_error(e), e != NULL) {
        /* On failure the weights are unchanged. */
        fulmen_tensor *now = NULL;
        double v = 1;
        if (fulmen_model_state_dict_get(m, "weight", &now) != NULL) abort();
        if (fulmen_tensor_sub(now, w1, &d) != NULL || fulmen_tensor_abs(d, &a) != NULL ||
            fulmen_tensor_max(a, &mx) != NULL || fulmen_tensor_item(mx, &v) != NULL || v != 0) {
            fprintf(stderr, "fuzz pickle: a failed load changed the weights\n");
            abort();
        }
        fulmen_tensor_free(now);
    } else {
        loaded++;
    }
    fulmen_tensor_free(mx);
    fulmen_tensor_free(a);
    fulmen_tensor_free(d);
    fulmen_tensor_free(w1);
    fulmen_tensor_free(w0);
    fulmen_model_free(m);
    /* The archive as a Lightning checkpoint to validate from. */
    e = fulmen_trainer_validate(run.trainer, run.module, run.loader, path);
    if (check_error(e), e == NULL) validated++;
    unlink(path);
    if (fulmen_live_handles() != before) {
        fprintf(stderr, "fuzz pickle: a handle leaked\n");
        abort();
    }
    return 0;
}
