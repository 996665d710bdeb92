/* gpt: a byte-level transformer language model trained from C.
 *
 *   --arch llama (default)  RMSNorm pre-norm, RoPE, SwiGLU, no biases
 *   --arch gpt2             LayerNorm, learned positions, GELU-tanh, biases,
 *                           tied embeddings: GPT-2's architecture (llm.c's
 *                           train_gpt2.c, nanoGPT)
 *
 * The model is tg_gpt (layers/gpt.c, built from the blocks of
 * layers/transformer.c): token ids are bytes 0..127. The text is Debian's
 * fortunes (the files of /usr/share/games/fortunes, about 2.5 MB of English;
 * scripts/deps.sh installs it) or --data FILE, split in 4 KiB chunks of
 * which every tenth is validation and the rest training (smaller chunks for
 * a small file). Each step trains
 * on --batch windows of --context bytes, each starting at a random place
 * drawn from the seeded RNG (so --save / --resume continue bit for bit),
 * with AdamW, a warmup-cosine schedule and gradient clipping.
 *
 * Prints the model, progress (loss, validation loss, tokens/s, ETA),
 * writes OUT/loss.png (train and validation loss) and prints --tokens N
 * bytes generated after --prompt at the end (tg_gpt_generate: a KV cache,
 * --temperature, --top-k, --top-p, drawn from --seed). --load FILE skips
 * the training: it builds the model a --save file holds (its config is in
 * the file) and only generates.
 *
 * --checkpoint-activations keeps only each block's input for backward,
 * which runs the block again (tg_checkpoint): the same gradients, bit for
 * bit, in less memory (docs/activation-checkpointing.md).
 *
 * --dtype bf16|f16 trains in mixed precision (docs/mixed-precision.md):
 * float32 parameters (the master weights AdamW updates, and the ones
 * saved), every layer computing in 16 bits under autocast
 * (tg_ctx_set_autocast), the loss in float32; f16 also scales the loss
 * (tg_grad_scaler) and skips a step whose gradient overflowed.
 *
 * Batches and processes (tapegrad/dist.h, docs/distributed.md): each
 * step's global batch of --batch windows is split into micro-batches,
 * --micro K per process and, under `mpirun -np P`, P processes; each
 * micro-batch's gradient is folded in order (the gradient accumulator, then
 * the all-reduce in rank order), so P processes give bitwise the
 * parameters of one process with --micro P. Every process reads the same
 * text, builds the same model from the seed and continues from rank 0's
 * state; only rank 0 prints, logs, evaluates, plots, saves and samples. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/dist.h"
#include "common/example.h"

#define VOCAB 128             /* ASCII */
#define CHUNK 4096            /* bytes; every SPLIT-th chunk is validation */
#define SPLIT 10              /* 90% / 10% */
#define EVAL_BATCHES 8        /* batches of fixed windows per validation */
#define MAX_BYTES (256 << 20) /* what --data may hold */
#define FORTUNES "/usr/share/games/fortunes"

/* ---- the text --------------------------------------------------------------------- */

typedef struct text {
    unsigned char *bytes;
    int64_t n, cap;
} text;

static bool text_put(text *t, const unsigned char *p, int64_t n) {
    if (t->n + n > t->cap) {
        int64_t cap = t->cap ? t->cap : 1 << 20;
        while (cap < t->n + n) cap *= 2;
        unsigned char *b = realloc(t->bytes, (size_t)cap);
        if (!b) return false;
        t->bytes = b;
        t->cap = cap;
    }
    memcpy(t->bytes + t->n, p, (size_t)n);
    t->n += n;
    return true;
}

/* Text bytes: printable ASCII, newline and tab. */
static bool is_text(unsigned c) { return (c >= 32 && c < 127) || c == '\n' || c == '\t'; }

/* Appends the bytes of path to t. strict (--data): the first byte that is
 * not text is an error naming it and its offset. Otherwise (the fortunes,
 * which hold a few hundred backspaces of overstruck text and some UTF-8)
 * such bytes are dropped and counted in *dropped. */
static bool read_text(const char *path, bool strict, text *t, int64_t *dropped) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gpt: cannot open %s: %s\n", path, strerror(errno));
        return false;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "gpt: %s is a directory, not a text file\n", path);
        fclose(f);
        return false;
    }
    unsigned char buf[65536];
    int64_t offset = 0;
    bool ok = true;
    size_t got;
    while (ok && (got = fread(buf, 1, sizeof buf, f)) > 0) {
        size_t keep = 0;
        for (size_t i = 0; i < got; i++) {
            if (is_text(buf[i])) {
                buf[keep++] = buf[i];
            } else if (strict) {
                fprintf(stderr,
                        "gpt: %s holds a byte that is not text: 0x%02x at offset %lld (--data needs ASCII: "
                        "printable characters, newlines, tabs)\n",
                        path, buf[i], (long long)(offset + (int64_t)i));
                ok = false;
                break;
            } else {
                ++*dropped;
            }
        }
        offset += (int64_t)got;
        if (ok && t->n + (int64_t)keep > MAX_BYTES) {
            fprintf(stderr, "gpt: %s is over %d MiB\n", path, MAX_BYTES >> 20);
            ok = false;
        }
        if (ok && !text_put(t, buf, (int64_t)keep)) {
            fprintf(stderr, "gpt: out of memory reading %s\n", path);
            ok = false;
        }
    }
    if (ok && ferror(f)) {
        fprintf(stderr, "gpt: reading %s: %s\n", path, strerror(errno));
        ok = false;
    }
    fclose(f);
    return ok;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The fortunes: every file of FORTUNES without a dot in its name (not the
 * .dat indexes nor the .u8 links), in name order. */
static bool read_fortunes(text *t, int64_t *dropped) {
    DIR *d = opendir(FORTUNES);
    if (!d) {
        fprintf(stderr,
                "gpt: cannot open %s: %s (on Debian: apt-get install fortunes, or scripts/deps.sh; or pass "
                "--data FILE)\n",
                FORTUNES, strerror(errno));
        return false;
    }
    char *names[512];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 512;)
        if (!strchr(e->d_name, '.') && (names[n] = strdup(e->d_name)) != NULL) n++;
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    bool ok = n > 0;
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FORTUNES, names[i]);
        struct stat sb;
        if (ok && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) ok = read_text(path, false, t, dropped);
        free(names[i]);
    }
    if (n == 0) fprintf(stderr, "gpt: %s holds no fortune files\n", FORTUNES);
    return ok;
}

/* Chunk c goes to validation when c % SPLIT == SPLIT - 1. Chunks are
 * CHUNK bytes, smaller for a text under 4 SPLIT CHUNK bytes, so it still
 * has at least 4 SPLIT chunks. */
static bool split_text(const text *all, text *train, text *val) {
    int64_t chunk = all->n / (4 * SPLIT);
    chunk = chunk > CHUNK ? CHUNK : chunk < 1 ? 1 : chunk;
    for (int64_t c = 0; c * chunk < all->n; c++) {
        int64_t at = c * chunk, len = all->n - at < chunk ? all->n - at : chunk;
        if (!text_put(c % SPLIT == SPLIT - 1 ? val : train, all->bytes + at, len)) return false;
    }
    return true;
}

/* The cross-entropy of val under train's byte frequencies (add-one
 * smoothed): what a model that ignores context can reach. */
static double unigram_loss(const text *train, const text *val) {
    double count[VOCAB], total = VOCAB, loss = 0;
    for (int c = 0; c < VOCAB; c++) count[c] = 1;
    for (int64_t i = 0; i < train->n; i++) count[train->bytes[i]] += 1, total += 1;
    for (int64_t i = 0; i < val->n; i++) loss -= log(count[val->bytes[i]] / total);
    return loss / (double)val->n;
}

/* ---- batches ----------------------------------------------------------------------- */

/* B windows of T + 1 bytes starting at start[b]: idx = the first T, tgt = the
 * T that follow. */
static void fill_batch(const text *d, int64_t B, int64_t T, const int64_t *start, int64_t *idx, int64_t *tgt) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            idx[b * T + t] = d->bytes[start[b] + t];
            tgt[b * T + t] = d->bytes[start[b] + t + 1];
        }
}

/* The mean loss over EVAL_BATCHES batches of evenly spaced windows of val
 * (the same every time; draws nothing from the RNG), no grad. Resets the
 * context after each batch. start: B entries of scratch. */
static double evaluate(tg_ctx *ctx, tg_gpt *g, const text *val, int64_t B, int64_t T, int64_t *idx, int64_t *tgt,
                       int64_t *start) {
    const int64_t n = EVAL_BATCHES * B, span = val->n - T - 1;
    bool was = tg_set_grad_enabled(ctx, false);
    double sum = 0;
    for (int64_t e = 0; e < EVAL_BATCHES; e++) {
        for (int64_t b = 0; b < B; b++) start[b] = (e * B + b) * span / n;
        fill_batch(val, B, T, start, idx, tgt);
        sum += tg_get_flat(ctx, tg_gpt_loss(ctx, g, B, T, idx, tgt), 0);
        tg_ctx_reset(ctx);
    }
    tg_set_grad_enabled(ctx, was);
    return sum / EVAL_BATCHES;
}

/* ---- sampling ---------------------------------------------------------------------- */

/* The sampling flags: --prompt (C escapes \n, \t, \\ read as such),
 * --tokens, --temperature, --top-k, --top-p; the draws come from --seed. */
typedef struct sampling {
    const char *prompt;
    int64_t tokens, top_k;
    double temperature, top_p;
} sampling;

/* The prompt's bytes as token ids into ids (at most max), its escapes
 * read; -1 (printed) for a byte that is not text, or more than max. */
static int64_t prompt_ids(const char *p, int64_t *ids, int64_t max) {
    int64_t n = 0;
    for (; *p; p++) {
        unsigned c = (unsigned char)*p;
        if (c == '\\' && (p[1] == 'n' || p[1] == 't' || p[1] == '\\')) c = *++p == 'n' ? '\n' : *p == 't' ? '\t' : '\\';
        if (!is_text(c)) {
            fprintf(stderr, "gpt: --prompt holds a byte that is not text: 0x%02x\n", c);
            return -1;
        }
        if (n == max) {
            fprintf(stderr, "gpt: --prompt holds more than %lld bytes, the model's context\n", (long long)max);
            return -1;
        }
        ids[n++] = c;
    }
    if (n == 0) fprintf(stderr, "gpt: --prompt is empty: the model needs at least one byte to go on from\n");
    return n > 0 ? n : -1;
}

static bool put_token(void *user, int64_t token) {
    (void)user;
    putchar((int)token);
    return fflush(stdout) == 0;
}

/* Prints the prompt, then up to --tokens bytes generated after it as they
 * come (tg_gpt_generate: the KV cache, sliding by half the context when it
 * fills). False (printed) on error. */
static bool sample(tg_ctx *ctx, tg_gpt *g, const sampling *s, uint64_t seed) {
    const int64_t T = g->config.context;
    int64_t *ids = malloc((size_t)T * sizeof *ids), *out = malloc((size_t)(s->tokens + 1) * sizeof *out);
    int64_t n = ids && out ? prompt_ids(s->prompt, ids, T) : -1;
    bool ok = n > 0;
    if (ok) {
        tg_gen_opts o = tg_gen_defaults();
        o.temperature = s->temperature;
        o.top_k = s->top_k;
        o.top_p = s->top_p;
        o.seed = seed;
        o.on_token = put_token;
        printf("sampled text (temperature %g, top-k %lld, top-p %g):\n", s->temperature, (long long)s->top_k, s->top_p);
        for (int64_t i = ids[0] == '\n' ? 1 : 0; i < n; i++) putchar((int)ids[i]); /* the prompt */
        ok = tg_gpt_generate(ctx, g, n, ids, s->tokens, &o, out) >= 0;
        putchar('\n');
        ok = !ex_failed(ctx) && ok;
    }
    free(ids);
    free(out);
    return ok;
}

/* The sampling flags past ex_parse's checks (exit status 2), the prompt
 * against the model's context (0: not known yet, --load). */
static bool check_sampling(const sampling *s, int64_t context) {
    if (context > 0) {
        int64_t *ids = malloc((size_t)context * sizeof *ids);
        const bool fits = ids && prompt_ids(s->prompt, ids, context) > 0;
        free(ids);
        if (!fits) return false;
    }
    if (s->tokens < 0) fprintf(stderr, "gpt: --tokens %lld must be >= 0\n", (long long)s->tokens);
    else if (!(s->temperature >= 0))
        fprintf(stderr, "gpt: --temperature %g must be >= 0 (0: greedy)\n", s->temperature);
    else if (s->top_k < 0) fprintf(stderr, "gpt: --top-k %lld must be >= 0 (0: all)\n", (long long)s->top_k);
    else if (!(s->top_p > 0 && s->top_p <= 1)) fprintf(stderr, "gpt: --top-p %g must be in (0, 1]\n", s->top_p);
    else return true;
    return false;
}

/* --load FILE: the model a --save file holds, built from the config in it
 * (the model flags are not needed), and text generated from it; no
 * training, no data. */
static int generate_only(const ex_args *args, const char *path, const sampling *s) {
    tg_ctx *ctx = tg_ctx_new(args->seed);
    if (!ctx) return 1;
    ex_setup(ctx, args);
    tg_params none = {0}, params = {0};
    tg_meta meta = {0};
    tg_ckpt_options extra = {.ignore_extra = true};
    tg_gpt *g = NULL;
    int rc = 1;
    if (tg_ckpt_load_ex(ctx, path, &none, NULL, &meta, &extra) == TG_OK) {
        const char *text = tg_meta_get(&meta, "gpt.config");
        char arch[16] = "", dtype[8] = "";
        long long L, H, C, T, V;
        tg_gpt_config c = tg_gpt_defaults(TG_GPT_LLAMA);
        if (!text || sscanf(text, "arch=%15s layers=%lld heads=%lld channels=%lld context=%lld vocab=%lld dtype=%7s",
                            arch, &L, &H, &C, &T, &V, dtype) != 7) {
            fprintf(stderr, "gpt: %s holds no gpt model (no gpt.config in its metadata)\n", path);
            rc = 2;
        } else {
            c.arch = strcmp(arch, "gpt2") == 0 ? TG_GPT_GPT2 : TG_GPT_LLAMA;
            c.n_layer = L, c.n_head = H, c.n_embd = C, c.context = T, c.vocab_size = V;
            c.dtype = strcmp(dtype, "f64") == 0 ? TG_F64 : TG_F32;
            tg_ctx_set_autocast(ctx, strcmp(dtype, "bf16") == 0  ? TG_BF16
                                     : strcmp(dtype, "f16") == 0 ? TG_F16
                                                                 : TG_F32);
            g = tg_gpt_new(ctx, NULL, &c);
            tg_module_params(ctx, TG_MODULE(g), &params);
            if (tg_ok(ctx) && tg_ckpt_load_ex(ctx, path, &params, NULL, NULL, &extra) == TG_OK) {
                printf("%s: %s, %lld parameters\n", path, text, (long long)tg_params_numel(&params));
                rc = sample(ctx, g, s, args->seed) ? 0 : 1;
            }
        }
    }
    if (rc == 1) ex_failed(ctx);
    tg_meta_free(&meta);
    tg_params_free(&params);
    tg_gpt_free(ctx, g);
    tg_ctx_free(ctx);
    return rc == 0 ? ex_exit(true) : rc;
}

/* ---- the run ----------------------------------------------------------------------- */

typedef struct run {
    int64_t batch, eval_every;
    double warmup, min_lr, weight_decay, beta1, beta2, eps, clip;
    sampling sample;
    char config[256];       /* the model's config as text, kept in checkpoints */
    int64_t micro;          /* --micro: micro-batches per process */
    tg_dist *dist;          /* the processes (a world of one without mpirun) */
    bool lead;              /* rank 0: the one that prints, logs, evaluates, saves */
    tg_grad_accum *acc;     /* folds this process's micro-batches */
    const char *dtype;      /* --dtype: f32, f64, bf16 or f16 */
    tg_grad_scaler *scaler; /* --dtype f16: the loss scaler; else NULL */
    int64_t skipped;        /* steps the scaler skipped */
    tg_train_part *part;    /* what --save writes */
} run;

/* ex_dist_agree over the run's processes: true on every rank, or false on
 * every rank with the reason printed. */
static bool all_ok(tg_ctx *ctx, const run *r, bool ok) { return ex_dist_agree(ctx, r->dist, ok); }

/* The model's config as stored in --save files and compared on --resume. */
static void config_text(char *buf, size_t size, const tg_gpt_config *c, const char *dtype) {
    snprintf(buf, size, "arch=%s layers=%lld heads=%lld channels=%lld context=%lld vocab=%lld dtype=%s",
             tg_gpt_arch_name(c->arch), (long long)c->n_layer, (long long)c->n_head, (long long)c->n_embd,
             (long long)c->context, (long long)c->vocab_size, dtype);
}

/* --resume: a file of another model is refused, naming both configs,
 * before anything is loaded. Returns the exit status to use, or -1 to go
 * on (then *start is the step the file holds). */
static int resume(tg_ctx *ctx, const ex_args *args, const run *r, tg_train_part *part, int64_t *start) {
    *start = 0;
    if (!args->resume) return -1;
    tg_params none = {0};
    tg_meta meta = {0};
    tg_ckpt_options only_meta = {.ignore_extra = true};
    if (tg_ckpt_load_ex(ctx, args->resume, &none, NULL, &meta, &only_meta) != TG_OK) {
        ex_failed(ctx);
        tg_meta_free(&meta);
        return 1;
    }
    const char *theirs = tg_meta_get(&meta, "gpt.config");
    if (!theirs || strcmp(theirs, r->config) != 0) {
        fprintf(stderr, "gpt: %s holds %s%s, but these flags make %s: resume with the flags it was trained with\n",
                args->resume, theirs ? "a model with " : "no gpt model", theirs ? theirs : "", r->config);
        tg_meta_free(&meta);
        return 2;
    }
    tg_meta_free(&meta);
    return ex_resume(ctx, args, part, 1, start) ? -1 : 1;
}

/* --save, at the end (step 0) or after step `step` (--save-every). */
static bool save(tg_ctx *ctx, const ex_args *args, const run *r, tg_train_part *part, int64_t step) {
    if (!args->save) return true;
    tg_meta meta = {0};
    bool ok = tg_meta_set(ctx, &meta, "gpt.config", r->config) && tg_meta_set(ctx, &meta, "dist.split", args->split) &&
              tg_train_save_parts(ctx, args->save, part, 1, &meta) == TG_OK;
    tg_meta_free(&meta);
    if (!ok) ex_failed(ctx);
    else if (step) ex_saved_at(args, step);
    else printf("saved the training state to %s\n", args->save);
    return ok;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One step's gradient, into the grads: this process's micro-batches of the
 * global batch of B windows (rank r's k-th is part r K + k of P K,
 * tg_dist_split), each folded into the accumulator with weight
 * (its windows) / B, then the processes' sums folded in rank order; *loss
 * is the global batch's mean loss, folded the same way. Window i of the
 * batch starts where the RNG's number at position i of the step's draws
 * says (tg_dist_draw), and every process moves the RNG past the whole
 * batch: the global batch is the same whatever P and K. A collective:
 * every rank reaches the all-reduces, also one in error (which then fails
 * them on every rank). idx, tgt: B T entries; starts: B. */
static bool step_gradient(tg_ctx *ctx, const run *r, tg_gpt *g, tg_params *params, tg_optim *opt, const text *tr,
                          int64_t *idx, int64_t *tgt, int64_t *starts, double *loss) {
    const int64_t B = r->batch, T = g->config.context;
    const int parts = tg_dist_size(r->dist) * (int)r->micro;
    uint64_t seed, base;
    tg_rng_state(ctx, &seed, &base);
    *loss = 0;
    for (int k = 0; k < (int)r->micro; k++) {
        int64_t start, count;
        tg_dist_split(B, parts, tg_dist_rank(r->dist) * (int)r->micro + k, &start, &count);
        if (!tg_dist_draw(ctx, tr->n - T - 1, start, count, starts)) break;
        fill_batch(tr, count, T, starts, idx, tgt);
        tg_tensor *l = tg_gpt_loss(ctx, g, count, T, idx, tgt);
        tg_optim_zero_grad(ctx, opt);
        /* f16: backward from scale * loss (unscaled before clipping) */
        tg_backward(ctx, r->scaler ? tg_grad_scaler_scale(ctx, r->scaler, l) : l);
        /* the fold of tg_grad_accum_add, for the loss: w l, then + w l */
        const double w = (double)count / (double)B, t = w * tg_get_flat(ctx, l, 0);
        tg_grad_accum_add(ctx, r->acc, w);
        *loss = k == 0 ? t : *loss + t;
        tg_ctx_reset(ctx);
    }
    tg_rng_set_state(ctx, seed, base + (uint64_t)B);
    tg_grad_accum_finish(ctx, r->acc);
    bool ok = tg_dist_allreduce_f64(ctx, r->dist, loss, 1, 1.0);
    return tg_dist_allreduce_grads(ctx, r->dist, params, 1.0) && ok;
}

/* Trains from step start + 1 to the last step; rank 0 logs every step's
 * batch loss to OUT/train.dat and the validation loss every eval_every
 * steps (and at the first and last) to OUT/val.dat. A collective. */
static bool train(tg_ctx *ctx, const ex_args *args, run *r, tg_gpt *g, tg_params *params, tg_optim *opt, const text *tr,
                  const text *val, int64_t start, double *loss_value, double *val_loss) {
    const char *tcols[] = {"step", "train_loss"}, *vcols[] = {"step", "val_loss"};
    tg_plot *tlog = NULL, *vlog = NULL;
    bool ok = !r->lead ||
              (ex_log_open(&tlog, args, "train", 2, tcols, start) && ex_log_open(&vlog, args, "val", 2, vcols, start));
    const int64_t B = r->batch, T = g->config.context;
    int64_t *idx = malloc((size_t)(B * T) * sizeof *idx), *tgt = malloc((size_t)(B * T) * sizeof *tgt);
    int64_t *starts = malloc((size_t)B * sizeof *starts);
    if (ok && !(idx && tgt && starts)) {
        fprintf(stderr, "gpt: out of memory for a batch of %lld x %lld tokens\n", (long long)B, (long long)T);
        ok = false;
    }
    ok = all_ok(ctx, r, ok);
    tg_progress progress;
    tg_progress_init(&progress, r->lead ? stdout : NULL, args->steps, args->every);
    tg_progress_set_mode(&progress, TG_PROGRESS_PLAIN);
    tg_progress_resume(&progress, start);
    double t0 = now();
    int64_t done = 0;
    for (int64_t step = start + 1; step <= ex_last_step(args) && ok; step++) {
        double loss;
        const bool reduced = step_gradient(ctx, r, g, params, opt, tr, idx, tgt, starts, &loss);
        const bool finite = !r->scaler || tg_grad_scaler_unscale(ctx, r->scaler, opt);
        /* an overflowed gradient is not clipped (its norm is inf): its step is skipped */
        double gnorm = r->clip > 0 && finite ? tg_clip_grad_norm(ctx, params, r->clip) : tg_grad_norm(ctx, params);
        double lr = tg_optim_lr(opt);
        if (r->scaler) {
            r->skipped += !tg_grad_scaler_step(ctx, r->scaler, opt);
            tg_grad_scaler_update(ctx, r->scaler);
        } else {
            tg_optim_step(ctx, opt);
        }
        if (!reduced) { /* every rank failed the all-reduce, with the reason */
            ex_failed(ctx);
            ok = false;
            break;
        }
        *loss_value = loss;
        tg_ctx_reset(ctx);
        done++;
        if (r->lead && tg_ok(ctx)) {
            ok = ex_log_row(&tlog, (double[]){(double)step, *loss_value});
            if (ok && ex_save_due(args, step)) ok = save(ctx, args, r, r->part, step);
            tg_progress_update(&progress, step, *loss_value, lr, gnorm);
            if (ok && (step == 1 || step % r->eval_every == 0 || step == args->steps)) {
                *val_loss = evaluate(ctx, g, val, B, T, idx, tgt, starts);
                ok = ex_log_row(&vlog, (double[]){(double)step, *val_loss});
                double sec = now() - t0;
                printf("step %lld: train loss %.4f, val loss %.4f, %.0f tokens/s\n", (long long)step, *loss_value,
                       *val_loss, sec > 0 ? (double)(done * B * T) / sec : 0.0);
                fflush(stdout);
            }
        }
        ok = all_ok(ctx, r, ok); /* rank 0's writes, and any rank's error */
    }
    tg_progress_finish(&progress);
    if (r->scaler && r->lead)
        printf("loss scale %g; %lld step%s skipped (gradient overflow)\n", tg_grad_scaler_get_scale(r->scaler),
               (long long)r->skipped, r->skipped == 1 ? "" : "s");
    free(idx);
    free(tgt);
    free(starts);
    ok = ex_log_close(&tlog) && ok;
    ok = ex_log_close(&vlog) && ok;
    return all_ok(ctx, r, ok);
}

/* Flags past ex_parse's checks: the values the model needs. Prints the
 * problem and returns false. */
static bool check_flags(const tg_gpt_config *c, const run *r) {
    const char *bad = NULL;
    char msg[256];
    if (c->n_layer < 1 || c->n_head < 1 || c->n_embd < 1 || c->context < 1)
        snprintf(msg, sizeof msg, "--layers %lld, --heads %lld, --channels %lld, --context %lld must all be >= 1",
                 (long long)c->n_layer, (long long)c->n_head, (long long)c->n_embd, (long long)c->context),
            bad = msg;
    else if (c->n_layer > 9999) /* tg_gpt_new's limit */
        snprintf(msg, sizeof msg, "--layers %lld: at most 9999", (long long)c->n_layer), bad = msg;
    else if (c->n_embd % c->n_head)
        snprintf(msg, sizeof msg, "--heads %lld does not divide --channels %lld", (long long)c->n_head,
                 (long long)c->n_embd),
            bad = msg;
    else if (c->arch == TG_GPT_LLAMA && (c->n_embd / c->n_head) % 2)
        snprintf(msg, sizeof msg, "RoPE needs an even head size: --channels %lld / --heads %lld = %lld",
                 (long long)c->n_embd, (long long)c->n_head, (long long)(c->n_embd / c->n_head)),
            bad = msg;
    else if (r->batch < 1) snprintf(msg, sizeof msg, "--batch %lld must be >= 1", (long long)r->batch), bad = msg;
    else if (r->micro < 1 || r->micro > 1000000)
        snprintf(msg, sizeof msg, "--micro %lld must be in 1..1000000", (long long)r->micro), bad = msg;
    else if (r->eval_every < 1)
        snprintf(msg, sizeof msg, "--eval-every %lld must be >= 1", (long long)r->eval_every), bad = msg;
    else if (r->warmup < 0 || r->min_lr < 0 || r->weight_decay < 0 || r->clip < 0)
        snprintf(msg, sizeof msg, "--warmup %g, --min-lr %g, --weight-decay %g, --clip %g must be >= 0", r->warmup,
                 r->min_lr, r->weight_decay, r->clip),
            bad = msg;
    if (bad) fprintf(stderr, "gpt: %s\n", bad);
    return !bad;
}

/* AdamW's flags: betas in [0, 1), eps > 0 (exit status 2 otherwise). */
static bool check_adamw(const run *r) {
    if (r->beta1 >= 0 && r->beta1 < 1 && r->beta2 >= 0 && r->beta2 < 1 && r->eps > 0) return true;
    fprintf(stderr, "gpt: --beta1 %g and --beta2 %g must be in [0, 1), --eps %g > 0\n", r->beta1, r->beta2, r->eps);
    return false;
}

/* True when the flags that decide what each process computes are the
 * same on every rank (tg_dist_same), else false on every rank with the
 * reason printed: ranks that disagree would wait for each other forever.
 * A collective. */
static bool same_flags(tg_ctx *ctx, const ex_args *args, const run *r) {
    char flags[768];
    snprintf(flags, sizeof flags,
             "steps=%lld stop-after=%lld seed=%llu lr=%.17g %s batch=%lld micro=%lld warmup=%.17g min-lr=%.17g "
             "weight-decay=%.17g beta1=%.17g beta2=%.17g eps=%.17g clip=%.17g",
             (long long)args->steps, (long long)args->stop_after, (unsigned long long)args->seed, args->lr, r->config,
             (long long)r->batch, (long long)r->micro, r->warmup, r->min_lr, r->weight_decay, r->beta1, r->beta2,
             r->eps, r->clip);
    return tg_dist_same(
               ctx, r->dist, flags, strlen(flags),
               "the flags (--steps, --stop-after, --seed, --lr, --arch, --layers, --heads, --channels, "
               "--context, --dtype, --batch, --micro, --warmup, --min-lr, --weight-decay, --beta1, --beta2, --eps, "
               "--clip)") ||
           !ex_failed(ctx);
}

int main(int argc, char **argv) {
    ex_args args = {.steps = 1200, .lr = 2e-3, .seed = 1, .out = "out/gpt", .every = 100};
    tg_gpt_config cfg = tg_gpt_defaults(TG_GPT_LLAMA);
    run r = {.batch = 8,
             .eval_every = 100,
             .sample = {.prompt = "\\n", .tokens = 400, .temperature = 0.8, .top_k = 0, .top_p = 1.0},
             .warmup = 50,
             .min_lr = 1e-4,
             .weight_decay = 0.1,
             .beta1 = 0.9,
             .beta2 = 0.99,
             .eps = 1e-8,
             .clip = 1.0,
             .micro = 1};
    const char *arch = "llama", *dtype = "f32", *data = NULL, *load = NULL;
    static const char *const archs[] = {"llama", "gpt2", NULL}, *const dtypes[] = {"f32", "f64", "bf16", "f16", NULL};
    ex_flag extra[] = {
        {"arch", EX_STR, &arch, "model: llama (RMSNorm, RoPE, SwiGLU) or gpt2 (default llama)", archs},
        {"layers", EX_INT, &cfg.n_layer, "transformer blocks (default 4)", NULL},
        {"heads", EX_INT, &cfg.n_head, "attention heads, dividing --channels (default 4)", NULL},
        {"channels", EX_INT, &cfg.n_embd, "width C of the model (default 128)", NULL},
        {"context", EX_INT, &cfg.context, "bytes the model sees: positions T (default 64)", NULL},
        {"batch", EX_INT, &r.batch, "windows per step: the global batch (default 8)", NULL},
        {"micro", EX_INT, &r.micro, "micro-batches per process, gradients accumulated (default 1)", NULL},
        {"warmup", EX_DBL, &r.warmup, "steps of linear lr warmup, then cosine decay (default 50)", NULL},
        {"min-lr", EX_DBL, &r.min_lr, "the lr the cosine ends at (default 1e-4)", NULL},
        {"weight-decay", EX_DBL, &r.weight_decay, "AdamW's decoupled weight decay (default 0.1)", NULL},
        {"beta1", EX_DBL, &r.beta1, "AdamW's beta1, the gradient's running-mean decay (default 0.9)", NULL},
        {"beta2", EX_DBL, &r.beta2, "AdamW's beta2, the squared gradient's running-mean decay (default 0.99)", NULL},
        {"eps", EX_DBL, &r.eps, "AdamW's eps, added to the root of the squared mean (default 1e-8)", NULL},
        {"checkpoint-activations", EX_BOOL, &cfg.checkpoint,
         "recompute each block's activations in backward instead of keeping them: less memory, the same "
         "gradients, about a third more time",
         NULL},
        {"clip", EX_DBL, &r.clip, "clip the gradient's norm to this; 0: no clipping (default 1)", NULL},
        {"dtype", EX_STR, &dtype,
         "parameters' type f32 or f64, or mixed precision bf16 / f16 (float32 parameters, layers in 16 bits "
         "under autocast; f16 scales the loss) (default f32)",
         dtypes},
        {"eval-every", EX_INT, &r.eval_every, "validation loss every N steps (default 100)", NULL},
        {"tokens", EX_INT, &r.sample.tokens, "bytes of text to generate at the end (default 400)", NULL},
        {"sample", EX_INT, &r.sample.tokens, "the same as --tokens", NULL},
        {"prompt", EX_STR, &r.sample.prompt, "the text generation starts from; \\n, \\t read as escapes (default \\n)",
         NULL},
        {"temperature", EX_DBL, &r.sample.temperature, "sampling temperature >= 0; 0: greedy (default 0.8)", NULL},
        {"top-k", EX_INT, &r.sample.top_k, "draw among the k likeliest bytes; 0: all (default 0)", NULL},
        {"top-p", EX_DBL, &r.sample.top_p,
         "draw among the likeliest bytes holding this probability, in (0, 1] (default 1)", NULL},
        {"load", EX_STR, &load, "no training: generate from the model a --save file holds", NULL},
        {"data", EX_STR, &data, "an ASCII text file to train on (default: the fortunes)", NULL},
        EX_FLAG_SAVE_EVERY(args),
        EX_FLAG_DIST_TIMEOUT(args),
    };
    int rc = ex_parse(&args, argc, argv, "gpt", "Trains a byte-level GPT (LLaMA or GPT-2 architecture) on text.", extra,
                      (int)(sizeof extra / sizeof *extra));
    if (rc >= 0) return rc;
    cfg.arch = strcmp(arch, "gpt2") == 0 ? TG_GPT_GPT2 : TG_GPT_LLAMA;
    cfg.dtype = strcmp(dtype, "f64") == 0 ? TG_F64 : TG_F32;
    const tg_dtype compute = strcmp(dtype, "bf16") == 0 ? TG_BF16 : strcmp(dtype, "f16") == 0 ? TG_F16 : TG_F32;
    if (!check_flags(&cfg, &r) || !check_sampling(&r.sample, load ? 0 : cfg.context) || !check_adamw(&r)) return 2;
    if (load) return generate_only(&args, load, &r.sample);
    config_text(r.config, sizeof r.config, &cfg, dtype);

    tg_ctx *ctx = tg_ctx_new(args.seed);
    if (!ctx) {
        fprintf(stderr, "gpt: out of memory\n");
        return 1;
    }
    tg_ctx_set_autocast(ctx, compute); /* TG_F32: off */
    /* The processes: a world of one unless mpirun started this one; only
     * rank 0 prints. */
    if (!(r.dist = ex_dist_join(ctx, &args, &argc, &argv, "gpt"))) {
        tg_ctx_free(ctx);
        return 1;
    }
    r.lead = tg_dist_rank(r.dist) == 0;
    const int nproc = tg_dist_size(r.dist);
    ex_dist_set_split(&args, r.dist, r.micro);
    bool ok = same_flags(ctx, &args, &r);
    const int64_t parts = (int64_t)nproc * r.micro;
    if (ok && r.batch < parts) {
        fprintf(stderr, "gpt: a batch of %lld windows cannot make %lld micro-batches (%d process%s x --micro %lld)\n",
                (long long)r.batch, (long long)parts, nproc, nproc > 1 ? "es" : "", (long long)r.micro);
        tg_dist_free(r.dist);
        tg_ctx_free(ctx);
        return 2;
    }

    text all = {0}, tr = {0}, val = {0};
    int64_t dropped = 0;
    ok = ok && (data ? read_text(data, true, &all, &dropped) : read_fortunes(&all, &dropped));
    ok = ok && split_text(&all, &tr, &val);
    if (ok && (tr.n < cfg.context + 2 || val.n < cfg.context + 2)) {
        fprintf(stderr,
                "gpt: %s holds %lld bytes: %lld for training and %lld for validation, but one window needs "
                "--context + 1 = %lld in each\n",
                data ? data : FORTUNES, (long long)all.n, (long long)tr.n, (long long)val.n,
                (long long)cfg.context + 1);
        ok = false;
    }
    /* every rank trains on the same text (a file of the same path may
     * differ between machines) */
    ok = all_ok(ctx, &r, ok) &&
         (tg_dist_same(ctx, r.dist, all.bytes, (size_t)all.n, "the texts (--data)") || !ex_failed(ctx));
    tg_gpt *g = NULL;
    tg_params params = {0};
    tg_optim *opt = NULL;
    int64_t start = 0;
    if (ok) {
        printf("%lld bytes of text from %s (%lld training, %lld validation)", (long long)all.n, data ? data : FORTUNES,
               (long long)tr.n, (long long)val.n);
        if (dropped) printf("; %lld bytes that are not ASCII text dropped", (long long)dropped);
        printf("\n");
        g = tg_gpt_new(ctx, NULL, &cfg);
        ok = !ex_failed(ctx);
    }
    tg_train_part part = {NULL, &params, NULL, NULL};
    r.part = &part;
    if (ok) {
        tg_module_print(stdout, TG_MODULE(g));
        tg_module_params(ctx, TG_MODULE(g), &params);
        printf("%s, %lld parameters; batch %lld x %lld tokens\n", r.config, (long long)tg_params_numel(&params),
               (long long)r.batch, (long long)cfg.context);
        tg_adam_opts o = tg_adamw_defaults();
        o.lr = args.lr;
        o.beta1 = r.beta1;
        o.beta2 = r.beta2;
        o.eps = r.eps;
        o.weight_decay = r.weight_decay;
        opt = tg_adamw_new(ctx, &params, &o);
        tg_schedule sched = {.kind = TG_SCHED_WARMUP_COSINE,
                             .warmup_steps = (int64_t)r.warmup < args.steps ? (int64_t)r.warmup : args.steps,
                             .total_steps = args.steps,
                             .start_factor = r.warmup >= 1 ? 1.0 / r.warmup : 1.0,
                             .min_lr = r.min_lr < args.lr ? r.min_lr : args.lr};
        tg_optim_set_schedule(ctx, opt, &sched);
        r.acc = tg_grad_accum_new(ctx, &params);
        if (compute == TG_F16) r.scaler = tg_grad_scaler_new(ctx, NULL);
        part.optim = opt;
        part.scaler = r.scaler;
        ok = !ex_failed(ctx);
    }
    if (ok && r.lead) { /* only rank 0 reads the file: the others receive its state below */
        rc = resume(ctx, &args, &r, &part, &start);
        ok = rc < 0;
    }
    /* Every process continues from rank 0's state: the parameters, the
     * optimizer and the RNG (the same everywhere when built from the seed;
     * after --resume, what rank 0 loaded). Collectives: reached by every
     * rank, also one that failed (the failure then ends every rank). */
    if (all_ok(ctx, &r, ok)) {
        ok = tg_dist_broadcast_params(ctx, r.dist, &params) && tg_dist_broadcast_optim(ctx, r.dist, opt) &&
             tg_dist_broadcast_rng(ctx, r.dist);
        if (ok && r.scaler) {
            ok = tg_dist_broadcast_params(ctx, r.dist, tg_grad_scaler_state(r.scaler));
            tg_grad_scaler_sync_state(ctx, r.scaler);
            ok = ok && tg_ok(ctx);
        }
        if (!ok) ex_failed(ctx);
    } else {
        ok = false;
    }
    if (ok) start = tg_optim_steps(opt);
    if (ok && (nproc > 1 || r.micro > 1))
        printf("gpt: %d process%s (%s), %d thread%s each; a global batch of %lld windows in %lld micro-batch%s\n",
               nproc, nproc > 1 ? "es" : "", tg_dist_backend(r.dist), tg_threads(ctx), tg_threads(ctx) > 1 ? "s" : "",
               (long long)r.batch, (long long)parts, parts > 1 ? "es" : "");
    double loss_value = NAN, val_loss = NAN;
    ok = ok && train(ctx, &args, &r, g, &params, opt, &tr, &val, start, &loss_value, &val_loss);
    const bool trained = ok; /* the same on every rank */
    if (ok && r.lead) {
        char title[320];
        snprintf(title, sizeof title, "gpt (%s): cross-entropy per byte", r.config);
        bool plotted = ex_plot_train_val(&args, title);
        printf("final train loss %.4f, validation loss %.4f (unigram baseline %.4f, uniform %.4f)\n", loss_value,
               val_loss, unigram_loss(&tr, &val), log((double)VOCAB));
        ok = save(ctx, &args, &r, &part, 0) && plotted;
    }
    if (ok && r.lead && r.sample.tokens > 0) ok = sample(ctx, g, &r.sample, args.seed);
    /* every rank ends with rank 0's status */
    if (trained) ok = all_ok(ctx, &r, ok);
    tg_grad_accum_free(ctx, r.acc);
    tg_grad_scaler_free(ctx, r.scaler);
    tg_optim_free(ctx, opt);
    tg_params_free(&params);
    tg_gpt_free(ctx, g);
    tg_dist_free(r.dist);
    tg_ctx_free(ctx);
    free(all.bytes);
    free(tr.bytes);
    free(val.bytes);
    if (rc >= 0 && rc != 1) return rc;
    return ex_exit(ok);
}
