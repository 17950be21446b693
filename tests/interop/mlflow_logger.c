/* fulmen's side of the MLflow logger test (tests/interop/mlflow_logger.py
 * starts a real `mlflow server` and reads what this wrote with MLflow's
 * own client).
 *
 *   mlflow_logger URI OUT fit    a 2-epoch fit logging to a CSV logger and
 *                                an MLflow logger at once, every checkpoint
 *                                saved on a background thread and
 *                                uploaded (log_model "all"), and a second
 *                                MLflow logger uploading at the end;
 *                                prints "run <id>", "run_end <id>",
 *                                "csv <log_dir>", "ckpt <path>"
 *   mlflow_logger URI OUT host   a host loop's calls on a logger without a
 *                                trainer, then a second logger resuming
 *                                the run by id; prints "run <id>"
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
            fprintf(stderr, "mlflow_logger: %s: code %d: %s\n", #call, (int)fulmen_error_code(e_),             \
                    fulmen_error_message(e_));                                                                 \
            fulmen_error_free(e_);                                                                             \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

static const char *uri, *out_dir;

#include "blob_fit.h"

static void print_run(fulmen_logger *l) {
    char id[256];
    size_t len = 0;
    TRY(fulmen_logger_mlflow_run_id(l, id, sizeof id, &len));
    printf("run %s\n", id);
}

static int fit(void) {
    job j = {NULL};
    blob_mlp(&j);
    fulmen_lightning_module *m = blob_module(&j, NULL);
    TRY(fulmen_lightning_module_set_hparam(m, "lr", "0.1"));
    TRY(fulmen_lightning_module_set_hparam(m, "hidden", "8"));

    fulmen_trainer_options *o = blob_fit_options(out_dir);
    /* Saves on a background thread: each upload must wait for its file. */
    TRY(fulmen_trainer_options_set_bool(o, "async_checkpoint_io", true));
    fulmen_trainer *t = NULL;
    TRY(fulmen_trainer_new(o, &t));
    fulmen_trainer_options_free(o);
    /* Two loggers at once: the CSV file is what the MLflow run must hold. */
    fulmen_logger *csv = NULL, *ml = NULL;
    TRY(fulmen_logger_csv_new(out_dir, &csv));
    TRY(fulmen_logger_set_flush_logs_every_n_steps(csv, 1));
    TRY(fulmen_logger_mlflow_new(uri, "fulmen-fit", &ml));
    TRY(fulmen_logger_mlflow_set_run_name(ml, "fit-run"));
    TRY(fulmen_logger_mlflow_set_tag(ml, "team", "fulmen"));
    TRY(fulmen_logger_mlflow_set_log_model(ml, FULMEN_MLFLOW_LOG_MODEL_ALL));
    refused(fulmen_logger_mlflow_set_log_model(ml, 7), FULMEN_CODE_INVALID_ARGUMENT, "log_model 7", "log_model 7");
    refused(fulmen_logger_set_version(ml, 3), FULMEN_CODE_INVALID_ARGUMENT, "MLflow logger", "set_version");
    refused(fulmen_logger_mlflow_set_run_name(csv, "x"), FULMEN_CODE_INVALID_ARGUMENT, "CSV logger", "csv run name");
    /* A third: log_model at the end uploads only what is on disk then. */
    fulmen_logger *at_end = NULL;
    TRY(fulmen_logger_mlflow_new(uri, "fulmen-fit", &at_end));
    TRY(fulmen_logger_mlflow_set_run_name(at_end, "fit-at-end"));
    TRY(fulmen_logger_mlflow_set_log_model(at_end, FULMEN_MLFLOW_LOG_MODEL_AT_END));
    TRY(fulmen_trainer_add_file_logger(t, csv));
    TRY(fulmen_trainer_add_file_logger(t, ml));
    TRY(fulmen_trainer_add_file_logger(t, at_end));
    fulmen_loader *loader = blobs();
    TRY(fulmen_trainer_fit(t, m, loader, loader, NULL));
    refused(fulmen_logger_mlflow_set_tag(ml, "late", "x"), FULMEN_CODE_INVALID_STATE, "already logs", "late tag");
    print_run(ml);
    char id[256];
    size_t id_len = 0;
    TRY(fulmen_logger_mlflow_run_id(at_end, id, sizeof id, &id_len));
    printf("run_end %s\n", id);
    fulmen_logger_free(at_end);
    char buf[1024];
    size_t len = 0;
    TRY(fulmen_logger_log_dir(csv, buf, sizeof buf, &len));
    printf("csv %s\n", buf);
    TRY(fulmen_trainer_checkpoint_path(t, FULMEN_CHECKPOINT_PATH_BEST, buf, sizeof buf, &len));
    printf("ckpt %s\n", buf);
    fulmen_logger_free(csv);
    fulmen_logger_free(ml);
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
    fulmen_logger *bad = NULL;
    refused(fulmen_logger_mlflow_new("https://example.com", NULL, &bad), FULMEN_CODE_UNSUPPORTED, "TLS", "https");
    refused(fulmen_logger_mlflow_new("file:./mlruns", NULL, &bad), FULMEN_CODE_INVALID_ARGUMENT, "mlflow server", "file:");
    /* An id the server does not know fails the first use. */
    TRY(fulmen_logger_mlflow_new(uri, NULL, &bad));
    TRY(fulmen_logger_mlflow_set_run_id(bad, "0123456789abcdef0123456789abcdef"));
    refused(fulmen_logger_finalize(bad, "bogus"), FULMEN_CODE_INVALID_ARGUMENT, "bogus", "finalize status");
    double v = 1;
    const char *name = "x";
    refused(fulmen_logger_log_metrics(bad, &name, &v, 1, 0), FULMEN_CODE_IO, "HTTP 404", "unknown run");
    fulmen_logger_free(bad);

    fulmen_logger *l = NULL;
    TRY(fulmen_logger_mlflow_new(uri, "fulmen-host", &l));
    TRY(fulmen_logger_set_prefix(l, "p"));
    TRY(fulmen_logger_mlflow_set_run_name(l, "host-run"));
    const char *keys[2] = {"optimizer", "long"};
    char longv[400];
    memset(longv, 'v', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    const char *values[2] = {"adamw", longv};
    TRY(fulmen_logger_log_hyperparams(l, keys, values, 2));
    /* The same value again is accepted; another one is MLflow's refusal. */
    TRY(fulmen_logger_log_hyperparams(l, keys, values, 1));
    const char *other[1] = {"sgd"};
    refused(fulmen_logger_log_hyperparams(l, keys, other, 1), FULMEN_CODE_IO, "INVALID_PARAMETER_VALUE", "changed param");
    log1(l, "loss", 0.5, 0);
    log1(l, "loss", 0.25, 1);
    log1(l, "nan", NAN, 1);
    log1(l, "inf", INFINITY, 1);
    log1(l, "val/acc:top-1", 0.75, 2); /* ':' is stripped, as Lightning strips it */
    char file[1024];
    snprintf(file, sizeof file, "%s/notes.txt", out_dir);
    FILE *f = fopen(file, "w");
    if (f == NULL) return 1;
    fputs("fulmen artifact\n", f);
    fclose(f);
    TRY(fulmen_logger_mlflow_log_artifact(l, file, "files/a b"));
    refused(fulmen_logger_mlflow_log_artifact(l, file, "../up"), FULMEN_CODE_INVALID_ARGUMENT, "..", "artifact ..");
    refused(fulmen_logger_mlflow_log_artifact(l, "/nonexistent/x", NULL), FULMEN_CODE_IO, NULL, "missing file");
    TRY(fulmen_logger_finalize(l, "failed"));
    char id[256];
    size_t len = 0;
    TRY(fulmen_logger_mlflow_run_id(l, id, sizeof id, &len));
    printf("run %s\n", id);
    fulmen_logger_free(l);

    /* A second logger resumes the run by id and ends it. */
    fulmen_logger *again = NULL;
    TRY(fulmen_logger_mlflow_new(uri, "ignored", &again));
    TRY(fulmen_logger_mlflow_set_run_id(again, id));
    log1(again, "loss", 0.125, 2);
    TRY(fulmen_logger_finalize(again, "success"));
    fulmen_logger_free(again);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: mlflow_logger URI OUT fit|host\n");
        return 2;
    }
    uri = argv[1];
    out_dir = argv[2];
    TRY(fulmen_set_num_threads(1));
    if (strcmp(argv[3], "fit") == 0) return fit();
    if (strcmp(argv[3], "host") == 0) return host();
    fprintf(stderr, "mlflow_logger: unknown mode %s\n", argv[3]);
    return 2;
}
