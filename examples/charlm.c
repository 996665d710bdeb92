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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/example.h"

#define CONTEXT 3   /* characters of context */
#define VOCAB 27    /* '.' (word boundary) and a-z */
#define EMB 24
#define HIDDEN 192
#define BATCH 128
#define VAL_SAMPLES 4096
#define MAX_WORD 24

typedef struct dataset {
    int64_t n;
    int64_t *ctx;    /* (n, CONTEXT) character ids */
    int64_t *next;   /* (n) the character that follows */
} dataset;

static int char_id(char c) { return c == '.' ? 0 : c - 'a' + 1; }
static char id_char(int64_t id) { return id == 0 ? '.' : (char)('a' + id - 1); }

/* Reads the word list, keeping words of 2..MAX_WORD-1 letters a-z. */
static char **read_words(const char *path, int64_t *count) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    int64_t n = 0, cap = 1024;
    char **words = malloc((size_t)cap * sizeof *words);
    char line[256];
    while (words && fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = '\0';
        bool ok = len >= 2 && len < MAX_WORD;
        for (size_t i = 0; ok && i < len; i++) ok = line[i] >= 'a' && line[i] <= 'z';
        if (!ok) continue;
        if (n == cap) {
            cap *= 2;
            char **w = realloc(words, (size_t)cap * sizeof *words);
            if (!w) break;
            words = w;
        }
        char *copy = malloc(len + 1);
        if (!copy) break;
        memcpy(copy, line, len + 1);
        words[n++] = copy;
    }
    fclose(f);
    *count = n;
    return words;
}

/* Every (context, next) pair of words[lo..hi): "emma" gives
 * "..." -> e, "..e" -> m, ".em" -> m, "emm" -> a, "mma" -> '.'. */
static void build_dataset(dataset *d, char **words, int64_t lo, int64_t hi) {
    int64_t n = 0;
    for (int64_t w = lo; w < hi; w++) n += (int64_t)strlen(words[w]) + 1;
    d->n = n;
    d->ctx = malloc((size_t)n * CONTEXT * sizeof *d->ctx);
    d->next = malloc((size_t)n * sizeof *d->next);
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

int main(int argc, char **argv) {
    ex_args args = {.steps = 3000, .lr = 3e-3, .seed = 1, .out = "out/charlm", .every = 250};
    const char *data = "/usr/share/dict/words";
    double temperature = 1.0;
    ex_flag extra[] = {
        {"data", EX_STR, &data, "word list, one word per line (default /usr/share/dict/words)", NULL},
        {"temperature", EX_DBL, &temperature, "sampling temperature > 0 (default 1)", NULL},
    };
    int rc = ex_parse(&args, argc, argv, "charlm", "Trains a character-level language model on a word list.",
                      extra, 2);
    if (rc >= 0) return rc;
    if (!(temperature > 0)) {
        fprintf(stderr, "charlm: --temperature must be > 0\n");
        return 2;
    }
    int64_t nwords = 0;
    char **words = read_words(data, &nwords);
    if (!words || nwords < 20) {
        fprintf(stderr, "charlm: cannot read enough words from %s (on Debian: apt-get install wamerican)\n", data);
        return 1;
    }
    tg_ctx *ctx = tg_ctx_new(args.seed);
    ex_setup(ctx, &args);
    for (int64_t i = nwords - 1; i > 0; i--) { /* seeded Fisher-Yates shuffle */
        int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)(i + 1));
        char *w = words[i];
        words[i] = words[j];
        words[j] = w;
    }
    dataset train, val;
    int64_t split = nwords * 9 / 10;
    build_dataset(&train, words, 0, split);
    build_dataset(&val, words, split, nwords);
    printf("%lld words from %s: %lld training and %lld validation samples\n", (long long)nwords, data,
           (long long)train.n, (long long)val.n);

    charlm m;
    charlm_init(ctx, &m);
    tg_model_print(stdout, &m.model);
    tg_params params = {0};
    tg_model_params(ctx, &m.model, &params);
    tg_adam_opts opts = tg_adamw_defaults();
    opts.lr = args.lr;
    tg_optim *opt = tg_adamw_new(ctx, &params, &opts);
    tg_schedule sched = {.kind = TG_SCHED_WARMUP_COSINE, .warmup_steps = args.steps / 20,
                         .total_steps = args.steps, .start_factor = 0.1, .min_lr = args.lr / 20};
    tg_optim_set_schedule(ctx, opt, &sched);
    if (ex_failed(ctx) || !ex_resume(ctx, &args, &params, opt)) return 1;

    const char *tcols[] = {"step", "train_loss"}, *vcols[] = {"step", "val_loss"};
    tg_plot *tlog = NULL, *vlog = NULL;
    if (tg_plot_open(&tlog, args.out, "train", 2, tcols) != TG_OK ||
        tg_plot_open(&vlog, args.out, "val", 2, vcols) != TG_OK) {
        fprintf(stderr, "charlm: cannot write logs in %s\n", args.out);
        return 1;
    }
    tg_progress progress;
    tg_progress_init(&progress, stdout, args.steps, args.every);
    int64_t batch_ctx[BATCH * CONTEXT], batch_next[BATCH];
    double loss_value = NAN, val_loss = NAN;
    for (int64_t step = tg_optim_steps(opt) + 1; step <= ex_last_step(&args); step++) {
        for (int b = 0; b < BATCH; b++) { /* a random minibatch */
            int64_t j = (int64_t)(tg_rng_uniform(ctx) * (double)train.n);
            memcpy(&batch_ctx[b * CONTEXT], &train.ctx[j * CONTEXT], sizeof(int64_t) * CONTEXT);
            batch_next[b] = train.next[j];
        }
        tg_tensor *loss = tg_cross_entropy(ctx, charlm_forward(ctx, &m, BATCH, batch_ctx), batch_next, NULL);
        tg_optim_zero_grad(ctx, opt);
        tg_backward(ctx, loss);
        double gnorm = tg_clip_grad_norm(ctx, &params, 1.0);
        double lr = tg_optim_lr(opt);
        tg_optim_step(ctx, opt);
        if (ex_failed(ctx)) return 1;
        loss_value = tg_get_flat(ctx, loss, 0);
        tg_plot_row(tlog, (double[]){(double)step, loss_value});
        if (step == 1 || step % args.every == 0 || step == args.steps) {
            val_loss = evaluate(ctx, &m, &val);
            tg_plot_row(vlog, (double[]){(double)step, val_loss});
        }
        tg_progress_update(&progress, step, loss_value, lr, gnorm);
        tg_ctx_reset(ctx);
    }
    tg_progress_finish(&progress);
    tg_plot_close_data(tlog);
    tg_plot_close_data(vlog);
    char tdat[512], vdat[512], msg[512];
    snprintf(tdat, sizeof tdat, "%s/train.dat", args.out);
    snprintf(vdat, sizeof vdat, "%s/val.dat", args.out);
    tg_plot_series series[2] = {{tdat, 1, 2, "train (one batch)"}, {vdat, 1, 2, "validation"}};
    tg_plot_style style = {.title = "charlm: cross-entropy per character", .xlabel = "step", .ylabel = "loss (nats)"};
    tg_plot_overlay(args.out, "loss", &style, series, 2, NULL, msg, sizeof msg);
    printf("%s\nfinal train loss %.4f, validation loss %.4f (uniform guessing: %.4f)\n", msg, loss_value, val_loss,
           log((double)VOCAB));
    if (!ex_save(ctx, &args, &params, opt)) return 1;

    printf("sampled words (temperature %g):", temperature);
    for (int i = 0; i < 12; i++) {
        char word[MAX_WORD];
        sample_word(ctx, &m, temperature, word);
        printf("%s %s", i % 6 ? "" : "\n ", word);
    }
    printf("\n");
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_model_free(ctx, &m.model);
    tg_ctx_free(ctx);
    for (int64_t i = 0; i < nwords; i++) free(words[i]);
    free(words);
    free(train.ctx);
    free(train.next);
    free(val.ctx);
    free(val.next);
    return 0;
}
