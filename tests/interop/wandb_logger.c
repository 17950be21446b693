/* fulmen's side of the W&B logger test (tests/interop/wandb_logger.py runs
 * the same fit with Lightning's WandbLogger in W&B's offline mode and reads
 * both `.wandb` files with W&B's own reader, `wandb leet inspect`).
 *
 *   wandb_logger OUT fit    a 2-epoch fit logging to a W&B logger (first,
 *                           so ModelCheckpoint writes under its
 *                           project/run id) and a CSV logger at once;
 *                           prints "run <run folder>", "csv <log_dir>",
 *                           "ckpt <path>"
 *   wandb_logger OUT host   a host loop's calls on loggers without a
 *                           trainer; prints "run <run folder>" per logger
 *
 * A failed call prints its error and exits 1; a call that should fail and
 * does not exits 3. */
#include <fulmen.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "wandb_logger: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),              \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static const char *out_dir;

#include "blob_fit.h"

static void print_run(fulmen_logger *l) {
    char dir[1024];
    size_t len = 0;
    TRY(fulmen_logger_wandb_run_dir(l, dir, sizeof dir, &len));
    printf("run %s\n", dir);
}

static int fit(void) {
    job j = {NULL};
    blob_mlp(&j);
    fulmen_lightning_module *m = blob_module(&j, NULL);
    TRY(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    TRY(fulmen_lightning_module_set_hparam(m, "hidden", "8"));

    fulmen_trainer_options *o = blob_fit_options(out_dir);
    fulmen_trainer *t = NULL;
    TRY(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    /* Two loggers at once: the CSV file is what the W&B history must hold. */
    fulmen_logger *wb = NULL, *csv = NULL;
    TRY(fulmen_logger_wandb_new(out_dir, "fulmen-fit", &wb));
    TRY(fulmen_logger_wandb_set_name(wb, "fit-run"));
    TRY(fulmen_logger_wandb_set_setting(wb, "group", "blobs"));
    TRY(fulmen_logger_wandb_set_setting(wb, "job_type", "train"));
    TRY(fulmen_logger_wandb_add_tag(wb, "mlp"));
    refused(fulmen_logger_wandb_set_setting(wb, "colour", "x"), FULMEN_CODE_INVALID_ARGUMENT, "colour", "setting");
    refused(fulmen_logger_set_version(wb, 3), FULMEN_CODE_INVALID_ARGUMENT, "W&B logger", "set_version");
    TRY(fulmen_logger_csv_new(out_dir, &csv));
    TRY(fulmen_logger_set_flush_logs_every_n_steps(csv, 1));
    refused(fulmen_logger_wandb_set_name(csv, "x"), FULMEN_CODE_INVALID_ARGUMENT, "CSV logger", "csv name");
    TRY(fulmen_trainer_add_file_logger(t, wb));
    TRY(fulmen_trainer_add_file_logger(t, csv));
    fulmen_loader *loader = blobs();
    TRY(fulmen_trainer_fit(t, m, loader, loader, NULL));
    refused(fulmen_logger_wandb_add_tag(wb, "late"), FULMEN_CODE_INVALID_STATE, "started", "late tag");
    print_run(wb);
    char buf[1024];
    size_t len = 0;
    TRY(fulmen_logger_log_dir(csv, buf, sizeof buf, &len));
    printf("csv %s\n", buf);
    TRY(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, buf, sizeof buf, &len));
    printf("ckpt %s\n", buf);
    fulmen_logger_free(csv);
    /* The trainer holds the logger too: the run ends when both let go. */
    fulmen_logger_free(wb);
    fulmen_loader_free(loader);
    fulmen_trainer_free(t);
    fulmen_lightning_module_free(m);
    fulmen_model_free(j.model);
    return 0;
}

static void log1(fulmen_logger *l, const char *name, double v, int64_t step) {
    TRY(fulmen_logger_log_metrics(l, &name, &v, 1, step));
}

static int host(void) {
    fulmen_logger *l = NULL;
    refused(fulmen_logger_wandb_new(out_dir, "p", NULL), FULMEN_CODE_NULL_ARGUMENT, "out", "NULL out");
    TRY(fulmen_logger_wandb_new(out_dir, "fulmen-host", &l));
    refused(fulmen_logger_wandb_set_id(l, "../up"), FULMEN_CODE_INVALID_ARGUMENT, "run id", "id ..");
    TRY(fulmen_logger_wandb_set_id(l, "host-run-1"));
    TRY(fulmen_logger_wandb_set_name(l, "host run"));
    TRY(fulmen_logger_wandb_set_setting(l, "notes", "a \"quoted\" note"));
    TRY(fulmen_logger_wandb_set_setting(l, "entity", "team"));
    TRY(fulmen_logger_wandb_add_tag(l, "a"));
    TRY(fulmen_logger_wandb_add_tag(l, "b"));
    TRY(fulmen_logger_wandb_add_tag(l, "a"));
    TRY(fulmen_logger_set_prefix(l, "p"));
    const char *keys[4] = {"optimizer", "lr", "layers", "amsgrad"};
    const char *values[4] = {"adamw", "0.001", "3", "true"};
    TRY(fulmen_logger_log_hyperparams(l, keys, values, 4));
    log1(l, "loss", 0.5, 0);
    log1(l, "loss", 0.25, 1);
    log1(l, "nan", NAN, 1);
    log1(l, "inf", -INFINITY, 2);
    log1(l, "tiny", 1e-7, 3);
    /* A record longer than two blocks of the file: FIRST, MIDDLE and LAST chunks. */
    static char big[70000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const char *bigk[1] = {"big"};
    const char *bigv[1] = {big};
    TRY(fulmen_logger_log_hyperparams(l, bigk, bigv, 1));
    log1(l, "after_big", 4.0, 4);
    TRY(fulmen_logger_finalize(l, "failed"));
    print_run(l);
    fulmen_logger_free(l);

    /* finish: exit code given, later logging refused, a second finish a no-op. */
    fulmen_logger *f = NULL;
    TRY(fulmen_logger_wandb_new(out_dir, NULL, &f));
    log1(f, "loss", 1.0, 0);
    TRY(fulmen_logger_wandb_finish(f, 0));
    TRY(fulmen_logger_wandb_finish(f, 5));
    double v = 2;
    const char *name = "loss";
    refused(fulmen_logger_log_metrics(f, &name, &v, 1, 1), FULMEN_CODE_INVALID_STATE, "finished", "after finish");
    print_run(f);
    fulmen_logger_free(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: wandb_logger OUT fit|host\n");
        return 2;
    }
    out_dir = argv[1];
    TRY(fulmen_set_num_threads(1));
    if (strcmp(argv[2], "fit") == 0) return fit();
    if (strcmp(argv[2], "host") == 0) return host();
    fprintf(stderr, "wandb_logger: unknown mode %s\n", argv[2]);
    return 2;
}
