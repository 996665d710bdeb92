/* Adam and AdamW, exactly as PyTorch's torch.optim.Adam / AdamW (1.13,
 * _single_tensor_adam / _single_tensor_adamw), at step t = 1, 2, ...:
 *
 *   AdamW only:  p = p * (1 - lr * weight_decay)          (decoupled decay)
 *   Adam only:   g = g + weight_decay * p                 (L2 penalty)
 *   m = beta1 * m + (1 - beta1) * g
 *   v = beta2 * v + (1 - beta2) * g * g
 *   amsgrad:     vmax = max(vmax, v), and vmax replaces v below
 *   bc1 = 1 - beta1^t,   bc2 = 1 - beta2^t
 *   denom = sqrt(v) / sqrt(bc2) + eps
 *   p = p - (lr / bc1) * m / denom
 *
 * The bias corrections bc1 and bc2 undo the zero start of m and v: at t = 1
 * m = (1 - beta1) g, so m / bc1 = g. */
#include "optim/internal.h"
#include "tensor/parallel.h"

#include <math.h>

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

/* The update of elements [i0, n), one at a time. p, g, m, v, vmax: (n)
 * each, distinct arrays (vmax NULL without amsgrad). */
#define ADAM_KERNEL(T, SQRT, SUFFIX)                                                                                   \
    static void adam_tail_##SUFFIX(T *restrict p, const T *restrict g, T *restrict m, T *restrict v, T *restrict vmax, \
                                   int64_t i0, int64_t n, T lr, T beta1, T beta2, T eps, T l2, T decoupled,            \
                                   T step_size, T bc2_sqrt) {                                                          \
        for (int64_t i = i0; i < n; i++) {                                                                             \
            T gi = g[i];                                                                                               \
            if (decoupled != 0) p[i] = p[i] * (1 - lr * decoupled);                                                    \
            if (l2 != 0) gi = gi + l2 * p[i];                                                                          \
            m[i] = m[i] * beta1 + (1 - beta1) * gi;                                                                    \
            v[i] = v[i] * beta2 + (1 - beta2) * (gi * gi);                                                             \
            T vv = v[i];                                                                                               \
            if (vmax) {                                                                                                \
                if (vv > vmax[i] || vv != vv) vmax[i] = vv; /* torch.maximum: NaN wins */                              \
                vv = vmax[i];                                                                                          \
            }                                                                                                          \
            T denom = SQRT(vv) / bc2_sqrt + eps;                                                                       \
            p[i] = p[i] - step_size * (m[i] / denom);                                                                  \
        }                                                                                                              \
    }
ADAM_KERNEL(float, sqrtf, f32)
ADAM_KERNEL(double, sqrt, f64)

/* The same update, W elements at a time with SIMD intrinsics, for the
 * elements [0, n - n % W); returns where the scalar tail starts. Every
 * element goes through exactly the scalar expressions above, operation by
 * operation (separate multiplies and adds, no FMA; IEEE sqrt and division),
 * so the results are bitwise those of the scalar loop. It exists because
 * compilers keep that loop scalar: sqrt may set errno, so GCC calls libm
 * per element (3.6 ns per parameter: 1 ms of a 2 ms MLP step with 270k
 * parameters). */
#define ADAM_SIMD(T, SUFFIX, V, W, LOAD, STORE, SET1, ADD, SUB, MUL, DIV, SQRT, AMSMAX)                              \
    static int64_t adam_simd_##SUFFIX(T *restrict p, const T *restrict g, T *restrict m, T *restrict v,              \
                                      T *restrict vmax, int64_t n, T lr, T beta1, T beta2, T eps, T l2, T decoupled, \
                                      T step_size, T bc2_sqrt) {                                                     \
        const V keep = SET1(1 - lr * decoupled), vl2 = SET1(l2);                                                     \
        const V b1 = SET1(beta1), omb1 = SET1(1 - beta1), b2 = SET1(beta2), omb2 = SET1(1 - beta2);                  \
        const V ve = SET1(eps), vs = SET1(step_size), vb = SET1(bc2_sqrt);                                           \
        int64_t i = 0;                                                                                               \
        for (; i + (W) <= n; i += (W)) {                                                                             \
            V pi = LOAD(p + i), gi = LOAD(g + i);                                                                    \
            if (decoupled != 0) pi = MUL(pi, keep);                                                                  \
            if (l2 != 0) gi = ADD(gi, MUL(vl2, pi));                                                                 \
            const V mi = ADD(MUL(LOAD(m + i), b1), MUL(omb1, gi));                                                   \
            V vi = ADD(MUL(LOAD(v + i), b2), MUL(omb2, MUL(gi, gi)));                                                \
            STORE(m + i, mi);                                                                                        \
            STORE(v + i, vi);                                                                                        \
            if (vmax) {                                                                                              \
                vi = AMSMAX(vi, LOAD(vmax + i));                                                                     \
                STORE(vmax + i, vi);                                                                                 \
            }                                                                                                        \
            const V denom = ADD(DIV(SQRT(vi), vb), ve);                                                              \
            STORE(p + i, SUB(pi, MUL(vs, DIV(mi, denom))));                                                          \
        }                                                                                                            \
        return i;                                                                                                    \
    }

#if defined(__AVX512F__)
/* max(vv, vm) as torch.maximum: vv where vv > vm or vv is NaN */
#define ADAM_MAX16(a, b) \
    _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), b, a)
#define ADAM_MAX8(a, b) \
    _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, b, _CMP_GT_OQ) | _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), b, a)
ADAM_SIMD(float, f32, __m512, 16, _mm512_loadu_ps, _mm512_storeu_ps, _mm512_set1_ps, _mm512_add_ps, _mm512_sub_ps,
          _mm512_mul_ps, _mm512_div_ps, _mm512_sqrt_ps, ADAM_MAX16)
ADAM_SIMD(double, f64, __m512d, 8, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_add_pd, _mm512_sub_pd,
          _mm512_mul_pd, _mm512_div_pd, _mm512_sqrt_pd, ADAM_MAX8)
#define ADAM_HAVE_SIMD 1
#elif defined(__AVX__)
#define ADAM_MAX8(a, b) \
    _mm256_blendv_ps(b, a, _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q)))
#define ADAM_MAX4(a, b) \
    _mm256_blendv_pd(b, a, _mm256_or_pd(_mm256_cmp_pd(a, b, _CMP_GT_OQ), _mm256_cmp_pd(a, a, _CMP_UNORD_Q)))
ADAM_SIMD(float, f32, __m256, 8, _mm256_loadu_ps, _mm256_storeu_ps, _mm256_set1_ps, _mm256_add_ps, _mm256_sub_ps,
          _mm256_mul_ps, _mm256_div_ps, _mm256_sqrt_ps, ADAM_MAX8)
ADAM_SIMD(double, f64, __m256d, 4, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd, _mm256_add_pd, _mm256_sub_pd,
          _mm256_mul_pd, _mm256_div_pd, _mm256_sqrt_pd, ADAM_MAX4)
#define ADAM_HAVE_SIMD 1
#endif

#ifdef ADAM_HAVE_SIMD
#define ADAM_DEFINE_UPDATE(T, SUFFIX)                                                                                \
    static void adam_##SUFFIX(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, T lr, T beta1, T beta2, T eps, T l2, \
                              T decoupled, T step_size, T bc2_sqrt) {                                                \
        int64_t i0 =                                                                                                 \
            adam_simd_##SUFFIX(p, g, m, v, vmax, n, lr, beta1, beta2, eps, l2, decoupled, step_size, bc2_sqrt);      \
        adam_tail_##SUFFIX(p, g, m, v, vmax, i0, n, lr, beta1, beta2, eps, l2, decoupled, step_size, bc2_sqrt);      \
    }
#else
#define ADAM_DEFINE_UPDATE(T, SUFFIX)                                                                                \
    static void adam_##SUFFIX(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, T lr, T beta1, T beta2, T eps, T l2, \
                              T decoupled, T step_size, T bc2_sqrt) {                                                \
        adam_tail_##SUFFIX(p, g, m, v, vmax, 0, n, lr, beta1, beta2, eps, l2, decoupled, step_size, bc2_sqrt);       \
    }
#endif
ADAM_DEFINE_UPDATE(float, f32)
ADAM_DEFINE_UPDATE(double, f64)

/* One step over every parameter that has a gradient, as one job of the
 * task pool (tensor/parallel.h): each parameter is cut into pieces of
 * ADAM_PIECE elements and every piece is a task, so the big matrices
 * spread over the threads and the small vectors ride along, with one
 * dispatch per step instead of one per parameter. The update is
 * elementwise (and the SIMD and scalar loops give the same bits), so the
 * result does not depend on the pieces or on the thread count. Measured
 * on the GPT small step (10.7 M parameters, 2 threads): AdamW was 8% of
 * the step and all of it ran on one thread. */
enum { ADAM_PIECE = 1 << 14 };

/* One parameter's share of the job: its arrays and its own decay terms. */
typedef struct adam_param {
    void *p, *m, *v, *vmax;
    const void *g;
    int64_t n;
    double l2, decoupled;
    bool f64;
} adam_param;

typedef struct adam_job {
    const adam_param *params;
    const int64_t *first; /* first[i]: the first task of params[i]; first[count]: the task count */
    int count;
    double lr, beta1, beta2, eps, step_size, bc2_sqrt;
} adam_job;

/* Elements [i0, i1) of one parameter. */
static void adam_range(const adam_job *j, const adam_param *a, int64_t i0, int64_t i1) {
    const int64_t n = i1 - i0;
    if (a->f64) {
        double *vmax = a->vmax ? (double *)a->vmax + i0 : NULL;
        adam_f64((double *)a->p + i0, (const double *)a->g + i0, (double *)a->m + i0, (double *)a->v + i0, vmax, n,
                 j->lr, j->beta1, j->beta2, j->eps, a->l2, a->decoupled, j->step_size, j->bc2_sqrt);
    } else {
        float *vmax = a->vmax ? (float *)a->vmax + i0 : NULL;
        adam_f32((float *)a->p + i0, (const float *)a->g + i0, (float *)a->m + i0, (float *)a->v + i0, vmax, n,
                 (float)j->lr, (float)j->beta1, (float)j->beta2, (float)j->eps, (float)a->l2, (float)a->decoupled,
                 (float)j->step_size, (float)j->bc2_sqrt);
    }
}

/* Task t: the parameter whose pieces hold t (a binary search of first[]),
 * and its piece. */
static void adam_task(void *arg, int64_t t, int worker) {
    const adam_job *j = arg;
    (void)worker;
    int lo = 0, hi = j->count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (j->first[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    const adam_param *a = &j->params[lo];
    const int64_t i0 = (t - j->first[lo]) * ADAM_PIECE;
    adam_range(j, a, i0, a->n - i0 < ADAM_PIECE ? a->n : i0 + ADAM_PIECE);
}

bool tg_adam_step(tg_ctx *ctx, tg_optim *o, double lr) {
    const tg_adam_opts *a = &o->adam;
    const double t = (double)(o->step + 1);
    const double bc1 = 1.0 - pow(a->beta1, t);
    const double bc2 = 1.0 - pow(a->beta2, t);
    adam_job j = {
        .lr = lr, .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps, .step_size = lr / bc1, .bc2_sqrt = sqrt(bc2)};
    /* the table of parameters and their first tasks: arena scratch, given
     * back at the end */
    const tg_arena_pos before = tg_arena_mark(ctx);
    adam_param *params = tg_arena_alloc_fn(ctx, "tg_optim_step", (size_t)o->nparams * sizeof *params);
    int64_t *first = tg_arena_alloc_fn(ctx, "tg_optim_step", ((size_t)o->nparams + 1) * sizeof *first);
    if (!params || !first) return false;
    int64_t tasks = 0, total = 0;
    for (int i = 0; i < o->nparams; i++) {
        const tg_param *pp = &o->params->items[i];
        tg_tensor *p = pp->value;
        if (!p->grad) continue; /* like PyTorch: no grad, no update */
        tg_tensor *vmax = tg_optim_slot(o, i, SLOT_MAX_EXP_AVG_SQ);
        const double wd = pp->weight_decay ? a->weight_decay : 0.0;
        params[j.count] = (adam_param){.p = p->data,
                                       .g = p->grad->data,
                                       .m = tg_optim_slot(o, i, SLOT_EXP_AVG)->data,
                                       .v = tg_optim_slot(o, i, SLOT_EXP_AVG_SQ)->data,
                                       .vmax = vmax ? vmax->data : NULL,
                                       .n = p->numel,
                                       .l2 = o->kind == TG_OPTIM_ADAM ? wd : 0.0,
                                       .decoupled = o->kind == TG_OPTIM_ADAMW ? wd : 0.0,
                                       .f64 = p->dtype == TG_F64};
        first[j.count++] = tasks;
        tasks += (p->numel + ADAM_PIECE - 1) / ADAM_PIECE;
        total += p->numel;
    }
    first[j.count] = tasks;
    j.params = params;
    j.first = first;
    tg_parallel(total >= TG_PAR_MIN ? tg_threads(ctx) : 1, tasks, adam_task, &j);
    tg_arena_release(ctx, before);
    return true;
}

tg_adam_opts tg_adam_defaults(void) {
    tg_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 0.0, false};
    return o;
}

tg_adam_opts tg_adamw_defaults(void) {
    tg_adam_opts o = {1e-3, 0.9, 0.999, 1e-8, 1e-2, false};
    return o;
}

/* Adam or AdamW from the options (NULL: the kind's defaults). */
static tg_optim *adam_new(tg_ctx *ctx, const char *fn, tg_optim_kind kind, tg_params *params, const tg_adam_opts *a) {
    if (!tg_ok(ctx)) return NULL;
    const tg_adam_opts dflt = kind == TG_OPTIM_ADAMW ? tg_adamw_defaults() : tg_adam_defaults();
    if (!a) a = &dflt;
    if (!tg_optim_check(ctx, fn, tg_finite_nonneg(a->lr), "lr", a->lr, "finite and >= 0")) return NULL;
    if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1)) {
        tg_error(ctx, TG_ERR_VALUE, fn, "betas=(%g, %g) must lie in [0, 1)", a->beta1, a->beta2);
        return NULL;
    }
    if (!tg_optim_check(ctx, fn, isfinite(a->eps) && a->eps > 0, "eps", a->eps, "finite and > 0") ||
        !tg_optim_check(ctx, fn, tg_finite_nonneg(a->weight_decay), "weight_decay", a->weight_decay, "finite and >= 0"))
        return NULL;
    bool want[SLOT_COUNT] = {false};
    want[SLOT_EXP_AVG] = want[SLOT_EXP_AVG_SQ] = true;
    want[SLOT_MAX_EXP_AVG_SQ] = a->amsgrad;
    tg_optim *o = tg_optim_make(ctx, fn, kind, params, a->lr, want);
    if (o) o->adam = *a;
    return o;
}

tg_optim *tg_adam_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts) {
    return adam_new(ctx, "tg_adam_new", TG_OPTIM_ADAM, params, opts);
}

tg_optim *tg_adamw_new(tg_ctx *ctx, tg_params *params, const tg_adam_opts *opts) {
    return adam_new(ctx, "tg_adamw_new", TG_OPTIM_ADAMW, params, opts);
}
