/* charlm: a character-level language model of English words (after
 * Bengio et al. 2003, as in Karpathy's makemore). From the previous few
 * characters of a word it predicts the next one:
 *
 *   embed each of CONTEXT chars (27 -> EMB) -> concat -> Linear -> RMSNorm
 *   -> tanh -> Linear -> 27 logits -> cross-entropy
 *
 * The words come from /usr/share/dict/words (Debian's wamerican) or
 * --data FILE, one per line; only all-lowercase a-z words are kept. They
 * are shuffled with the seed and split 90% train / 10% validation. Writes
 * OUT/loss.png (train and validation loss) and prints a dozen sampled
 * words at the end. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/example.h"

#define CONTEXT 3 /* characters of context */
#define VOCAB 27  /* '.' (word boundary) and a-z */
#define EMB 24
#define HIDDEN 192
#define BATCH 128
#define VAL_SAMPLES 4096
#define MAX_WORD 24 /* words have 2..MAX_WORD-1 letters */
#define MIN_WORDS 20

typedef struct dataset {
    int64_t n;
    int64_t *ctx;  /* (n, CONTEXT) character ids */
    int64_t *next; /* (n) the character that follows */
} dataset;

static int char_id(char c) { return c == '.' ? 0 : c - 'a' + 1; }
static char id_char(int64_t id) { return id == 0 ? '.' : (char)('a' + id - 1); }

/* The word list: words of 2..MAX_WORD-1 letters a-z, one per line. */
typedef struct word_list {
    char **words;
    int64_t n, cap;
} word_list;

static void word_list_free(word_list *w) {
    for (int64_t i = 0; i < w->n; i++) free(w->words[i]);
    free(w->words);
    memset(w, 0, sizeof *w);
}

static bool word_list_add(word_list *w, const char *line, size_t len) {
    if (w->n == w->cap) {
        int64_t cap = w->cap ? 2 * w->cap : 1024;
        char **words = realloc(w->words, (size_t)cap * sizeof *words);
        if (!words) return false;
        w->words = words;
        w->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return false;
    memcpy(copy, line, len);
    copy[len] = '\0';
    w->words[w->n++] = copy;
    return true;
}

/* A device or a pipe need not end (/dev/zero never does): at most this
 * much is read from anything but a regular file. The default word list is
 * about 1 MB. */
#define MAX_STREAM_BYTES (64 << 20)

/* Reads the words of path into w. On failure prints why (a missing file, a
 * folder, an empty file, binary data, too few words) and returns false. */
static bool read_words(const char *path, bool is_default, word_list *w) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "charlm: cannot open %s: %s%s\n", path, strerror(errno),
                is_default && errno == ENOENT ? " (on Debian: apt-get install wamerican, or pass --data FILE)" : "");
        return false;
    }
    struct stat sb;
    const char *problem = NULL;
    bool regular = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode);
    if (!regular && S_ISDIR(sb.st_mode)) problem = "is a directory, not a word list";
    char line[MAX_WORD];
    size_t len = 0;
    int64_t bytes = 0, lineno = 1;
    bool ok = true, cut = false; /* the line so far is a word; a '\r' ended it */
    for (int c; !problem && (c = getc(f)) != EOF;) {
        if (++bytes > MAX_STREAM_BYTES && !regular) {
            fprintf(stderr, "charlm: note: %s is not a regular file, so only its first %d MiB were read\n", path,
                    MAX_STREAM_BYTES >> 20);
            break;
        }
        if (c == '\0') {
            fprintf(stderr, "charlm: %s holds binary data (a NUL byte on line %lld), not a word list\n", path,
                    (long long)lineno);
            problem = ""; /* printed */
        } else if (c == '\n') {
            if (ok && len >= 2 && !word_list_add(w, line, len)) problem = "is too big: out of memory";
            len = 0, ok = true, cut = false, lineno++;
        } else if (cut || c == '\r') {
            cut = true;
        } else if (len < MAX_WORD - 1) {
            line[len++] = (char)c;
            ok = ok && c >= 'a' && c <= 'z';
        } else {
            ok = false;
        }
    }
    if (!problem && ferror(f)) problem = strerror(errno);
    if (!problem && ok && len >= 2 && !word_list_add(w, line, len)) problem = "is too big: out of memory";
    if (!problem && bytes == 0) problem = "is empty";
    fclose(f);
    if (problem) {
        if (*problem) fprintf(stderr, "charlm: %s %s\n", path, problem);
        return false;
    }
    if (w->n < MIN_WORDS) {
        fprintf(stderr, "charlm: %s has %lld usable word%s (lines of 2-%d letters a-z); at least %d are needed\n", path,
                (long long)w->n, w->n == 1 ? "" : "s", MAX_WORD - 1, MIN_WORDS);
        return false;
    }
    return true;
}

/* Every (context, next) pair of words[lo..hi): "emma" gives
 * "..." -> e, "..e" -> m, ".em" -> m, "emm" -> a, "mma" -> '.'. */
static bool build_dataset(dataset *d, char **words, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t w = lo; w < hi; w++) n += (int64_t)strlen(words[w]) + 1;
    d->n = n;
    d->ctx = malloc((size_t)n * CONTEXT * sizeof *d->ctx);
    d->next = malloc((size_t)n * sizeof *d->next);
    if (!d->ctx || !d->next) {
        fprintf(stderr, "charlm: out of memory for %lld samples\n", (long long)n);
        return false;
    }
    int64_t k = 0;
    for (int64_t w = lo; w < hi; w++) {
        int64_t window[CONTEXT] = {0};
        for (const char *c = words[w];; c++) {
            int64_t id = *c ? char_id(*c) : 0;
            memcpy(&d->ctx[k * CONTEXT], window, sizeof window);
            d->next[k++] = id;
            if (!*c) break;
            memmove(window, window + 1, (CONTEXT - 1) * sizeof *window);
            window[CONTEXT - 1] = id;
        }
    }
    return true;
}

typedef struct charlm {
    tg_model model;
    tg_embedding_layer *emb;
    tg_linear *fc1, *fc2;
    tg_rmsnorm *norm;
} charlm;

static void charlm_init(tg_ctx *ctx, charlm *m) {
    memset(m, 0, sizeof *m);
    m->emb = tg_embedding_layer_new(ctx, "emb", VOCAB, EMB, TG_F32);
    m->fc1 = tg_linear_new(ctx, "fc1", CONTEXT * EMB, HIDDEN, true, TG_F32);
    m->norm = tg_rmsnorm_new(ctx, "norm", 1, (int64_t[]){HIDDEN}, TG_RMSNORM_EPS, true, false, TG_F32);
    m->fc2 = tg_linear_new(ctx, "fc2", HIDDEN, VOCAB, true, TG_F32);
    tg_model_add(ctx, &m->model, TG_MODULE(m->emb));
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc1));
    tg_model_add(ctx, &m->model, TG_MODULE(m->norm));
    tg_model_add(ctx, &m->model, TG_MODULE(m->fc2));
}

/* logits (b, VOCAB) for b contexts (b, CONTEXT) */
static tg_tensor *charlm_forward(tg_ctx *ctx, charlm *m, int64_t b, const int64_t *contexts) {
    tg_tensor *e = tg_embedding_layer_forward(ctx, m->emb, TG_SHAPE(b, CONTEXT), contexts); /* (b, 3, EMB) */
    tg_tensor *h = tg_reshape(ctx, e, TG_SHAPE(b, CONTEXT * EMB));
    h = tg_tanh(ctx, tg_rmsnorm_forward(ctx, m->norm, tg_linear_forward(ctx, m->fc1, h)));
    return tg_linear_forward(ctx, m->fc2, h);
}

/* Mean loss over (up to) VAL_SAMPLES evenly spaced samples, no grad. */
static double evaluate(tg_ctx *ctx, charlm *m, const dataset *d) {
    int64_t n = d->n < VAL_SAMPLES ? d->n : VAL_SAMPLES;
    int64_t *c = tg_arena_alloc(ctx, (size_t)n * CONTEXT * sizeof *c);
    int64_t *t = tg_arena_alloc(ctx, (size_t)n * sizeof *t);
    if (!c || !t) return NAN;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i * (d->n / n);
        memcpy(&c[i * CONTEXT], &d->ctx[j * CONTEXT], CONTEXT * sizeof *c);
        t[i] = d->next[j];
    }
    bool was = tg_set_grad_enabled(ctx, false);
    double loss = tg_get_flat(ctx, tg_cross_entropy(ctx, charlm_forward(ctx, m, n, c), t, NULL), 0);
    tg_set_grad_enabled(ctx, was);
    return loss;
}

/* Samples a word: start from "...", draw each next character from
 * softmax(logits / temperature) until '.' comes out. */
static void sample_word(tg_ctx *ctx, charlm *m, double temperature, char *out) {
    int64_t window[CONTEXT] = {0};
    int len = 0;
    bool was = tg_set_grad_enabled(ctx, false);
    while (len < MAX_WORD - 1) {
        tg_tensor *p = tg_softmax(ctx, tg_mul_scalar(ctx, charlm_forward(ctx, m, 1, window), 1.0 / temperature));
        double u = tg_rng_uniform(ctx), acc = 0;
        int64_t id = VOCAB - 1;
        for (int64_t k = 0; k < VOCAB; k++) {
            acc += tg_get_flat(ctx, p, k);
            if (u < acc) {
                id = k;
                break;
            }
        }
        if (id == 0 || !tg_ok(ctx)) break;
        out[len++] = id_char(id);
        memmove(window, window + 1, (CONTEXT - 1) * sizeof *window);
        window[CONTEXT - 1] = id;
    }
    out[len] = '\0';
    tg_set_grad_enabled(ctx, was);
    tg_ctx_reset(ctx);
}

/* Trains m from step start + 1 to the last step; logs OUT/train.dat (every
 * step's batch loss) and OUT/val.dat (the validation loss every --every
 * steps). Sets *loss_value and *val_loss to the last ones. */
static bool train(tg_ctx *ctx, const ex_args *args, charlm *m, tg_params *params, tg_optim *opt, const dataset *train,
                  const dataset *val, int64_t start, double *loss_value, double *val_loss) {
    const char *tcols[] = {"step", "train_loss"}, *vcols[] = {"step", "val_loss"};
    tg_plot *tlog = NULL, *vlog = NULL;
    if (!ex_log_open(&tlog, args, "train", 2, tcols, start) || !ex_log_open(&vlog, args, "val", 2, vcols, start)) {
        ex_log_close(&tlog);
        return false;
    }
    tg_progress progress;
    tg_progress_init(&progress, stdout, args->steps, args->every);
    tg_progress_resume(&progress, start);
    int64_t batch_ctx[BATCH * CONTEXT], batch_next[BATCH];
    bool ok = true;
    for (int64_t step = start + 1; step <= ex_last_step(args) && ok; step++) {
        for (int b = 0; b < BATCH; b++) { /* a random minibatch */
            int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)train->n);
            memcpy(&batch_ctx[b * CONTEXT], &train->ctx[j * CONTEXT], sizeof(int64_t) * CONTEXT);
            batch_next[b] = train->next[j];
        }
        tg_tensor *loss = tg_cross_entropy(ctx, charlm_forward(ctx, m, BATCH, batch_ctx), batch_next, NULL);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        double gnorm = tg_clip_grad_norm(ctx, params, 1.0);
        double lr = tg_optim_lr(opt);
        tg_optim_step(ctx, opt);
        if (ex_failed(ctx)) break;
        *loss_value = tg_get_flat(ctx, loss, 0);
        ok = ex_log_row(&tlog, (double[]){(double)step, *loss_value});
        if (ok && (step == 1 || step % args->every == 0 || step == args->steps)) {
            *val_loss = evaluate(ctx, m, val);
            ok = ex_log_row(&vlog, (double[]){(double)step, *val_loss});
        }
        if (ok && ex_save_due(args, step)) ok = ex_save(ctx, args, &(tg_train_part){NULL, params, opt, NULL}, 1, step);
        tg_progress_update(&progress, step, *loss_value, lr, gnorm);
        tg_ctx_reset(ctx);
    }
    tg_progress_finish(&progress);
    ok = ok && tg_ok(ctx);
    ok = ex_log_close(&tlog) && ok;
    return ex_log_close(&vlog) && ok;
}

int main(int argc, char **argv) {
    ex_args args = {.steps = 3000, .lr = 3e-3, .seed = 1, .out = "out/charlm", .every = 250};
    const char *default_data = "/usr/share/dict/words", *data = default_data;
    double temperature = 1.0;
    ex_flag extra[] = {
        {"data", EX_STR, &data, "word list, one word per line (default /usr/share/dict/words)", NULL},
        {"temperature", EX_DBL, &temperature, "sampling temperature > 0 (default 1)", NULL},
        EX_FLAG_SAVE_EVERY(args),
    };
    int rc = ex_parse(&args, argc, argv, "charlm", "Trains a character-level language model on a word list.", extra,
                      (int)(sizeof extra / sizeof *extra));
    if (rc >= 0) return rc;
    if (!ex_save_folder_ok(&args)) return 1;
    if (!(temperature > 0)) {
        fprintf(stderr, "charlm: --temperature must be > 0\n");
        return 2;
    }
    word_list words = {0};
    if (!read_words(data, data == default_data, &words)) {
        word_list_free(&words);
        return 1;
    }
    tg_ctx *ctx = tg_ctx_new(args.seed);
    if (!ctx) {
        fprintf(stderr, "charlm: out of memory\n");
        word_list_free(&words);
        return 1;
    }
    ex_setup(ctx, &args);
    for (int64_t i = words.n - 1; i > 0; i--) { /* seeded Fisher-Yates shuffle */
        int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)(i + 1));
        char *w = words.words[i];
        words.words[i] = words.words[j];
        words.words[j] = w;
    }
    dataset train_set = {0}, val_set = {0};
    int64_t split = words.n * 9 / 10;
    bool ok = build_dataset(&train_set, words.words, 0, split) && build_dataset(&val_set, words.words, split, words.n);
    if (ok)
        printf("%lld words from %s: %lld training and %lld validation samples\n", (long long)words.n, data,
               (long long)train_set.n, (long long)val_set.n);

    charlm m = {0};
    tg_params params = {0};
    tg_optim *opt = NULL;
    int64_t start = 0;
    if (ok) {
        charlm_init(ctx, &m);
        tg_model_print(stdout, &m.model);
        tg_model_params(ctx, &m.model, &params);
        tg_adam_opts opts = tg_adamw_defaults();
        opts.lr = args.lr;
        opt = tg_adamw_new(ctx, &params, &opts);
        tg_schedule sched = {.kind = TG_SCHED_WARMUP_COSINE,
                             .warmup_steps = args.steps / 20,
                             .total_steps = args.steps,
                             .start_factor = 0.1,
                             .min_lr = args.lr / 20};
        tg_optim_set_schedule(ctx, opt, &sched);
        tg_train_part part = {NULL, &params, opt, NULL};
        ok = !ex_failed(ctx) && ex_resume(ctx, &args, &part, 1, &start);
    }
    double loss_value = NAN, val_loss = NAN;
    ok = ok && train(ctx, &args, &m, &params, opt, &train_set, &val_set, start, &loss_value, &val_loss);
    if (ok) {
        bool plotted = ex_plot_train_val(&args, "charlm: cross-entropy per character");
        printf("final train loss %.4f, validation loss %.4f (uniform guessing: %.4f)\n", loss_value, val_loss,
               log((double)VOCAB));
        tg_train_part part = {NULL, &params, opt, NULL};
        ok = ex_save(ctx, &args, &part, 1, 0) && plotted;
    }
    if (ok) {
        printf("sampled words (temperature %g):", temperature);
        for (int i = 0; i < 12; i++) {
            char word[MAX_WORD];
            sample_word(ctx, &m, temperature, word);
            printf("%s %s", i % 6 ? "" : "\n ", word);
        }
        printf("\n");
    }
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_model_free(ctx, &m.model);
    tg_ctx_free(ctx);
    word_list_free(&words);
    free(train_set.ctx);
    free(train_set.next);
    free(val_set.ctx);
    free(val_set.next);
    return ex_exit(ok);
}
