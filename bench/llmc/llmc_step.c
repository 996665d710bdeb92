/* llmc_step: times the training step of llm.c's train_gpt2.c (the CPU
 * reference of github.com/karpathy/llm.c) at a GPT-2 size of our choice,
 * for scripts/llmc_bench.sh, which sets it beside tapegrad's GPT step.
 *
 * llm.c is third-party code under the MIT license that the user provides
 * (LLMC_DIR, a checkout of it); none of it is in this repository. This
 * file is ours: it includes $LLMC_DIR/train_gpt2.c unmodified, with
 * TESTING defined (llm.c's own switch that leaves out its main, as its
 * test_gpt2.c does), and calls its functions. What llm.c's main hard-codes
 * (the checkpoint and data paths, B=4, T=64, 40 steps with sampling every
 * 20) is what this driver replaces:
 *
 *   1. it writes a GPT-2 checkpoint in llm.c's format (the layout its
 *      gpt2_build_from_checkpoint reads, described at write_checkpoint),
 *      initialized like GPT-2 from a fixed seed;
 *   2. it writes the token files in llm.c's data format (write_tokens):
 *      the bytes below the vocabulary size of the given text files,
 *      split 90/10 into training and validation;
 *   3. it loads both with llm.c's own gpt2_build_from_checkpoint and
 *      dataloader_init, and times the step exactly as llm.c's main does:
 *      next batch, forward, zero-grad, backward, AdamW update.
 *
 * Build (scripts/llmc_bench.sh does, with llm.c's Makefile flags):
 *   gcc -Ofast -march=native -fopenmp -DOMP -I"$LLMC_DIR" \
 *       bench/llmc/llmc_step.c -lm -lgomp -o llmc_step
 * Usage:
 *   OMP_NUM_THREADS=1 llmc_step --dir DIR [--layers 4] [--heads 4]
 *       [--channels 128] [--context 64] [--batch 4] [--vocab 128]
 *       [--steps 10] [--warmup 2] [--seed 1337] TEXT_FILE...
 * It prints the per-step times and, last, one line
 *   result params=P threads=N steps=S wall_ms=W cpu_ms=U loss0=A loss=B val_loss=V
 * with the medians of the wall-clock and process-CPU time of a step. */
#define TESTING
#include "train_gpt2.c"

#include <errno.h>

/* ---- a seeded normal generator (ours; llm.c's own rand.h is for its loader) */

static uint64_t lb_state;

static uint64_t lb_next(void) { /* splitmix64 */
    uint64_t z = (lb_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in (0, 1): 53 random bits, never 0 (log below) */
static double lb_uniform(void) { return ((double)(lb_next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* standard normal by Box-Muller */
static double lb_normal(void) {
    const double u = lb_uniform(), v = lb_uniform();
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* ---- the checkpoint ------------------------------------------------------ */

static void die(const char *what, const char *path) {
    fprintf(stderr, "llmc_step: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

/* Writes n floats: value + std * N(0, 1) each (std 0 writes the constant). */
static void put_floats(FILE *f, size_t n, float value, double std, const char *path) {
    float buf[4096];
    while (n > 0) {
        const size_t k = n < 4096 ? n : 4096;
        for (size_t i = 0; i < k; i++) buf[i] = std > 0 ? (float)(std * lb_normal()) : value;
        if (fwrite(buf, sizeof(float), k, f) != k) die("cannot write", path);
        n -= k;
    }
}

/* llm.c's model file, as its gpt2_build_from_checkpoint reads it: a
 * header of 256 int32 (magic 20240326; version 3, float32 weights; the
 * context maxT; the vocabulary V; layers L; heads NH; channels C; the
 * vocabulary padded to a multiple of 128, Vp; the rest zero), then every
 * parameter as float32, tensor after tensor in llm.c's order:
 *   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C),
 *   qkvw (L, 3C, C), qkvb (L, 3C), attprojw (L, C, C), attprojb (L, C),
 *   ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
 *   fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C).
 * The values are GPT-2's initialization (the values do not change the
 * time of a step): embeddings and weights N(0, 0.02), the two projections
 * into the residual stream N(0, 0.02 / sqrt(2 L)), norm gains 1, biases 0;
 * the padded rows of wte are 0. Returns the number of parameters. */
static size_t write_checkpoint(const char *path, int maxT, int V, int L, int NH, int C) {
    const int Vp = (V + 127) / 128 * 128;
    int header[256] = {0};
    header[0] = 20240326, header[1] = 3, header[2] = maxT, header[3] = V;
    header[4] = L, header[5] = NH, header[6] = C, header[7] = Vp;
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot create", path);
    if (fwrite(header, sizeof header, 1, f) != 1) die("cannot write", path);
    const size_t c = (size_t)C, l = (size_t)L;
    const double std = 0.02, proj_std = 0.02 / sqrt(2.0 * L);
    put_floats(f, (size_t)V * c, 0, std, path);      /* wte: the V real rows */
    put_floats(f, (size_t)(Vp - V) * c, 0, 0, path); /* ... and the padding */
    put_floats(f, (size_t)maxT * c, 0, std, path);   /* wpe */
    put_floats(f, l * c, 1, 0, path);                /* ln1w */
    put_floats(f, l * c, 0, 0, path);                /* ln1b */
    put_floats(f, l * 3 * c * c, 0, std, path);      /* qkvw */
    put_floats(f, l * 3 * c, 0, 0, path);            /* qkvb */
    put_floats(f, l * c * c, 0, proj_std, path);     /* attprojw */
    put_floats(f, l * c, 0, 0, path);                /* attprojb */
    put_floats(f, l * c, 1, 0, path);                /* ln2w */
    put_floats(f, l * c, 0, 0, path);                /* ln2b */
    put_floats(f, l * 4 * c * c, 0, std, path);      /* fcw */
    put_floats(f, l * 4 * c, 0, 0, path);            /* fcb */
    put_floats(f, l * 4 * c * c, 0, proj_std, path); /* fcprojw */
    put_floats(f, l * c, 0, 0, path);                /* fcprojb */
    put_floats(f, c, 1, 0, path);                    /* lnfw */
    put_floats(f, c, 0, 0, path);                    /* lnfb */
    if (fclose(f) != 0) die("cannot write", path);
    return (size_t)Vp * c + (size_t)maxT * c + l * (12 * c * c + 13 * c) + 2 * c;
}

/* ---- the token files ------------------------------------------------------ */

/* llm.c's data file, as its dataloader reads it: a header of 256 int32
 * (magic 20240520, version 1, the number of tokens n; the rest zero), then
 * the n tokens as uint16. */
static void write_tokens(const char *path, const uint16_t *tok, size_t n) {
    int header[256] = {0};
    header[0] = 20240520, header[1] = 1, header[2] = (int)n;
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot create", path);
    if (fwrite(header, sizeof header, 1, f) != 1 || fwrite(tok, sizeof *tok, n, f) != n) die("cannot write", path);
    if (fclose(f) != 0) die("cannot write", path);
}

/* The bytes below V of the files, in order, as tokens (*n of them). */
static uint16_t *read_tokens(char **files, int nfiles, int V, size_t *n) {
    size_t cap = 1 << 20, len = 0;
    uint16_t *tok = malloc(cap * sizeof *tok);
    if (!tok) die("out of memory for", "the text");
    for (int i = 0; i < nfiles; i++) {
        FILE *f = fopen(files[i], "rb");
        if (!f) die("cannot open", files[i]);
        for (int ch; (ch = getc(f)) != EOF;) {
            if (ch >= V) continue;
            if (len == cap) {
                uint16_t *grown = realloc(tok, 2 * cap * sizeof *tok);
                if (!grown) die("out of memory for", files[i]);
                tok = grown, cap *= 2;
            }
            tok[len++] = (uint16_t)ch;
        }
        fclose(f);
    }
    *n = len;
    return tok;
}

/* ---- timing --------------------------------------------------------------- */

static double seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, by_value);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static int int_arg(const char *flag, const char *value, int lo) {
    char *end;
    errno = 0;
    const long v = strtol(value, &end, 10);
    if (errno || *end || end == value || v < lo || v > 1 << 20) {
        fprintf(stderr, "llmc_step: %s '%s': expected an integer in %d..%d\n", flag, value, lo, 1 << 20);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv) {
    int L = 4, NH = 4, C = 128, T = 64, B = 4, V = 128, steps = 10, warmup = 2, seed = 1337;
    const char *dir = NULL;
    char **files = NULL;
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *target = !strcmp(a, "--layers")     ? &L
                      : !strcmp(a, "--heads")    ? &NH
                      : !strcmp(a, "--channels") ? &C
                      : !strcmp(a, "--context")  ? &T
                      : !strcmp(a, "--batch")    ? &B
                      : !strcmp(a, "--vocab")    ? &V
                      : !strcmp(a, "--steps")    ? &steps
                      : !strcmp(a, "--warmup")   ? &warmup
                      : !strcmp(a, "--seed")     ? &seed
                                                 : NULL;
        if (target && v) {
            *target = int_arg(a, v, target == &warmup || target == &seed ? 0 : 1);
            i++;
        } else if (!strcmp(a, "--dir") && v) {
            dir = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "llmc_step: unknown flag or missing value: %s (see bench/llmc/llmc_step.c)\n", a);
            return 2;
        } else {
            files = argv + i, nfiles = argc - i;
            break;
        }
    }
    if (!dir || nfiles == 0 || V > 65536 || C % NH) {
        fprintf(stderr, "llmc_step: needs --dir DIR and text files; --vocab <= 65536; --heads dividing --channels "
                        "(see bench/llmc/llmc_step.c)\n");
        return 2;
    }
    lb_state = (uint64_t)seed;

    char model_path[4096], train_path[4096], val_path[4096];
    snprintf(model_path, sizeof model_path, "%s/gpt2_L%d_H%d_C%d_T%d_V%d.bin", dir, L, NH, C, T, V);
    snprintf(train_path, sizeof train_path, "%s/train_V%d.bin", dir, V);
    snprintf(val_path, sizeof val_path, "%s/val_V%d.bin", dir, V);
    const size_t written = write_checkpoint(model_path, T, V, L, NH, C);
    size_t n;
    uint16_t *tok = read_tokens(files, nfiles, V, &n);
    const size_t n_train = n / 10 * 9;
    if (n - n_train < (size_t)(B * T + 1)) {
        fprintf(stderr, "llmc_step: the text has %zu tokens below %d: too few for a batch of %d x %d\n", n, V, B, T);
        return 2;
    }
    write_tokens(train_path, tok, n_train);
    write_tokens(val_path, tok + n_train, n - n_train);
    free(tok);

    GPT2 model;
    gpt2_build_from_checkpoint(&model, model_path);
    if (model.num_parameters != written) {
        fprintf(stderr, "llmc_step: llm.c read %zu parameters, we wrote %zu\n", model.num_parameters, written);
        return 1;
    }
    DataLoader train, val;
    dataloader_init(&train, train_path, B, T, 0, 1, 1);
    dataloader_init(&val, val_path, B, T, 0, 1, 0);
#ifdef OMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif

    /* The step as llm.c's main times it; AdamW with the bench's settings
     * (bench/vs_pytorch.c gpt_init: lr 3e-3, betas 0.9 and 0.99, weight
     * decay 0.1). */
    double *wall = malloc((size_t)steps * sizeof *wall), *cpu = malloc((size_t)steps * sizeof *cpu);
    float loss0 = 0;
    for (int s = 0; s < warmup + steps; s++) {
        const double w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
        dataloader_next_batch(&train);
        gpt2_forward(&model, train.inputs, train.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, 3e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, s + 1);
        const double w1 = seconds(CLOCK_MONOTONIC), c1 = seconds(CLOCK_PROCESS_CPUTIME_ID);
        if (s == 0) loss0 = model.mean_loss;
        if (s >= warmup) wall[s - warmup] = w1 - w0, cpu[s - warmup] = c1 - c0;
        printf("step %d: train loss %f (took %.3f ms, %.3f ms CPU)%s\n", s, model.mean_loss, 1e3 * (w1 - w0),
               1e3 * (c1 - c0), s < warmup ? " warm-up" : "");
    }
    const float loss = model.mean_loss;
    float val_loss = 0; /* a sanity check: the mean loss over 5 validation batches */
    for (int i = 0; i < 5; i++) {
        dataloader_next_batch(&val);
        gpt2_forward(&model, val.inputs, val.targets, B, T);
        val_loss += model.mean_loss / 5;
    }
    printf("result params=%zu threads=%d steps=%d wall_ms=%.3f cpu_ms=%.3f loss0=%.4f loss=%.4f val_loss=%.4f\n",
           model.num_parameters, threads, steps, 1e3 * median(wall, steps), 1e3 * median(cpu, steps), loss0, loss,
           val_loss);
    free(wall);
    free(cpu);
    dataloader_free(&train);
    dataloader_free(&val);
    gpt2_free(&model);
    return 0;
}
