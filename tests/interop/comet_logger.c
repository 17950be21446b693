/* fulmen's side of the Comet logger test (tests/interop/comet_logger.py
 * runs the same fit with Lightning's CometLogger offline and reads both
 * archives with comet_ml's own upload code, `OfflineSender`).
 *
 *   comet_logger OUT fit    a 2-epoch fit logging to a Comet logger (first,
 *                           so ModelCheckpoint writes under its
 *                           project/key) and a CSV logger at once; prints
 *                           "archive <path>", "csv <log_dir>", "ckpt <path>"
 *   comet_logger OUT host   a host loop's calls on loggers without a
 *                           trainer; prints "archive <path>" per logger
 *   comet_logger OUT died   logs, then exits without ending the
 *                           experiment (as a killed process); prints
 *                           "work <working folder>"
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
#include <unistd.h>

#define TRY(call)                                                                                              \
    do {                                                                                                       \
        fulmen_error *e_ = (call);                                                                             \
        if (e_) {                                                                                              \
            fprintf(stderr, "comet_logger: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),              \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static const char *out_dir;

#include "blob_fit.h"

static void print_archive(fulmen_logger *l) {
    char path[1024];
    size_t len = 0;
    TRY(fulmen_logger_comet_archive_path(l, path, sizeof path, &len));
    printf("archive %s\n", path);
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
    /* Two loggers at once: the CSV file is what the Comet metrics must hold. */
    fulmen_logger *cl = NULL, *csv = NULL;
    TRY(fulmen_logger_comet_new(out_dir, "fulmen-fit", &cl));
    TRY(fulmen_logger_comet_set_name(cl, "fit-run"));
    TRY(fulmen_logger_comet_add_tag(cl, "mlp"));
    refused(fulmen_logger_comet_set_mode(cl, "append"), FULMEN_CODE_INVALID_ARGUMENT, "append", "mode");
    refused(fulmen_logger_set_version(cl, 3), FULMEN_CODE_INVALID_ARGUMENT, "Comet logger", "set_version");
    TRY(fulmen_logger_csv_new(out_dir, &csv));
    TRY(fulmen_logger_set_flush_logs_every_n_steps(csv, 1));
    refused(fulmen_logger_comet_set_name(csv, "x"), FULMEN_CODE_INVALID_ARGUMENT, "CSV logger", "csv name");
    TRY(fulmen_trainer_add_file_logger(t, cl));
    TRY(fulmen_trainer_add_file_logger(t, csv));
    fulmen_loader *loader = blobs();
    TRY(fulmen_trainer_fit(t, m, loader, loader, NULL));
    refused(fulmen_logger_comet_add_tag(cl, "late"), FULMEN_CODE_INVALID_STATE, "started", "late tag");
    print_archive(cl);
    char buf[1024];
    size_t len = 0;
    TRY(fulmen_logger_log_dir(csv, buf, sizeof buf, &len));
    printf("csv %s\n", buf);
    TRY(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, buf, sizeof buf, &len));
    printf("ckpt %s\n", buf);
    fulmen_logger_free(csv);
    /* The trainer holds the logger too: the experiment ends when both let go. */
    fulmen_logger_free(cl);
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
    refused(fulmen_logger_comet_new(out_dir, "p", NULL), FULMEN_CODE_NULL_ARGUMENT, "out", "NULL out");
    TRY(fulmen_logger_comet_new(out_dir, "fulmen-host", &l));
    refused(fulmen_logger_comet_set_experiment_key(l, "../up"), FULMEN_CODE_INVALID_ARGUMENT, "key", "key ..");
    TRY(fulmen_logger_comet_set_experiment_key(l, "hostrun0123456789abcdef0123456789"));
    TRY(fulmen_logger_comet_set_mode(l, "get"));
    TRY(fulmen_logger_comet_set_name(l, "host run"));
    TRY(fulmen_logger_comet_set_workspace(l, "team"));
    TRY(fulmen_logger_comet_add_tag(l, "a"));
    TRY(fulmen_logger_comet_add_tag(l, "b"));
    TRY(fulmen_logger_comet_add_tag(l, "a"));
    TRY(fulmen_logger_set_prefix(l, "p"));
    const char *keys[4] = {"optimizer", "lr", "layers", "amsgrad"};
    const char *values[4] = {"adamw", "0.001", "3", "true"};
    TRY(fulmen_logger_log_hyperparams(l, keys, values, 4));
    log1(l, "loss", 0.5, 0);
    log1(l, "loss", 0.25, 1);
    log1(l, "nan", NAN, 1);
    log1(l, "inf", -INFINITY, 2);
    log1(l, "tiny", 1e-7, 3);
    /* A name and a value past comet_ml's lengths, cut as it cuts them. */
    static char longname[151], longvalue[1501];
    memset(longname, 'n', sizeof longname - 1);
    memset(longvalue, 'v', sizeof longvalue - 1);
    const char *lk[1] = {longname};
    const char *lv[1] = {longvalue};
    TRY(fulmen_logger_log_hyperparams(l, lk, lv, 1));
    log1(l, longname, 4.0, 4);
    /* The same value again is not written again; a changed one is. */
    TRY(fulmen_logger_log_hyperparams(l, keys, values, 4));
    const char *changed[4] = {"adamw", "0.002", "3", "true"};
    TRY(fulmen_logger_log_hyperparams(l, keys, changed, 4));
    TRY(fulmen_logger_finalize(l, "failed"));
    print_archive(l);
    TRY(fulmen_logger_comet_end(l));
    fulmen_logger_free(l);

    /* end: later logging refused, a second end a no-op; the default project. */
    fulmen_logger *f = NULL;
    TRY(fulmen_logger_comet_new(out_dir, NULL, &f));
    TRY(fulmen_logger_comet_set_mode(f, "create"));
    log1(f, "loss", 1.0, 0);
    TRY(fulmen_logger_comet_end(f));
    TRY(fulmen_logger_comet_end(f));
    double v = 2;
    const char *name = "loss";
    refused(fulmen_logger_log_metrics(f, &name, &v, 1, 1), FULMEN_CODE_INVALID_STATE, "ended", "after end");
    print_archive(f);
    fulmen_logger_free(f);
    return 0;
}

static int died(void) {
    fulmen_logger *l = NULL;
    TRY(fulmen_logger_comet_new(out_dir, "fulmen-died", &l));
    log1(l, "loss", 0.75, 0);
    log1(l, "loss", 0.5, 1);
    TRY(fulmen_logger_save(l));
    char path[1024];
    size_t len = 0;
    TRY(fulmen_logger_comet_archive_path(l, path, sizeof path, &len));
    /* The working folder is the archive's name with .partial for .zip. */
    path[len - 4] = '\0';
    printf("work %s.partial\n", path);
    fflush(stdout);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: comet_logger OUT fit|host|died\n");
        return 2;
    }
    out_dir = argv[1];
    TRY(fulmen_set_num_threads(1));
    if (strcmp(argv[2], "fit") == 0) return fit();
    if (strcmp(argv[2], "host") == 0) return host();
    if (strcmp(argv[2], "died") == 0) return died();
    fprintf(stderr, "comet_logger: unknown mode %s\n", argv[2]);
    return 2;
}
