/* The curvature RMSNorm removes: the top Hessian eigenvalue of a tiny
 * MLP's loss, with and without RMSNorm after its first layer, as the first
 * layer's weights are scaled by c -- by power iteration on Hessian-vector
 * products (tg_hvp: reverse over reverse, the double backward).
 *
 * The model: h = x W1^T + b1 (4 -> 16), optionally h = rmsnorm(h) (no
 * gain), a = tanh(h), y = a W2^T (16 -> 2), loss = mean (y - t)^2 over 64
 * fixed points. For each c, W1 and b1 are c times fixed draws; the rest is
 * the same. RMSNorm makes the loss invariant to c (up to eps), so its
 * gradient with respect to the first layer scales as 1/c and its Hessian
 * block as 1/c^2 (docs/normalization-gradients.md, section 11); without
 * it, the curvature follows tanh's saturation instead.
 *
 * Prints, per c: c, then the top eigenvalue (largest |lambda|, signed) of
 * the Hessian over all parameters and over the first layer only, plain
 * and with RMSNorm. scripts/experiments/hessian.sh plots it.
 *   hessian [--iters N] [--seed N] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tapegrad.h>

enum { NPTS = 64, DIN = 4, DH = 16, DOUT = 2, NPARAM = 3 };

typedef struct draws {
    double x[NPTS * DIN], t[NPTS * DOUT], w1[DH * DIN], b1[DH], w2[DOUT * DH];
} draws;

static void fill(tg_ctx *ctx, double *v, int n, double std) {
    for (int i = 0; i < n; i++) v[i] = std * tg_rng_normal(ctx);
}

static tg_tensor *tensor(tg_ctx *ctx, int ndim, const int64_t *shape, const double *v, double scale) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return NULL;
    for (int64_t i = 0; i < n; i++) s[i] = scale * v[i];
    tg_tensor *t = tg_from_buffer(ctx, TG_F64, ndim, shape, s);
    free(s);
    return t;
}

/* The top eigenvalue of the loss's Hessian over params[0..np-1]: power
 * iteration v <- H v / |H v| from a fixed start; the Rayleigh quotient
 * v . H v at the end. */
static double top_eigenvalue(tg_ctx *ctx, tg_tensor *loss, int np, tg_tensor **params, int iters) {
    int64_t n = 0, off[NPARAM + 1] = {0};
    for (int k = 0; k < np; k++) off[k + 1] = n += params[k]->numel;
    double *v = malloc((size_t)n * sizeof *v), *hv = malloc((size_t)n * sizeof *hv);
    double lambda = NAN;
    if (!v || !hv) goto done;
    for (int64_t i = 0; i < n; i++) v[i] = cos(1.0 + 0.7 * (double)i); /* fixed, not special */
    for (int it = 0; it <= iters; it++) {
        double norm = 0;
        for (int64_t i = 0; i < n; i++) norm += v[i] * v[i];
        norm = sqrt(norm);
        tg_tensor *vt[NPARAM], *h[NPARAM];
        for (int k = 0; k < np; k++) {
            vt[k] = tensor(ctx, params[k]->ndim, params[k]->shape, v + off[k], 1.0 / norm);
        }
        if (!tg_hvp(ctx, loss, np, params, vt, h)) goto done;
        double dot = 0, hn = 0;
        for (int k = 0; k < np; k++)
            for (int64_t i = 0; i < off[k + 1] - off[k]; i++) {
                double hi = tg_get_flat(ctx, h[k], i);
                dot += hi * v[off[k] + i] / norm;
                hv[off[k] + i] = hi;
                hn += hi * hi;
            }
        lambda = dot;
        if (hn == 0) break;
        memcpy(v, hv, (size_t)n * sizeof *v);
    }
done:
    free(v);
    free(hv);
    return lambda;
}

/* Both eigenvalues (all parameters, first layer) of one model at scale c. */
static int measure(const draws *d, double c, bool norm, int iters, double *all, double *first) {
    tg_ctx *ctx = tg_ctx_new(1);
    if (!ctx) return 1;
    tg_tensor *x = tensor(ctx, 2, (int64_t[]){NPTS, DIN}, d->x, 1);
    tg_tensor *t = tensor(ctx, 2, (int64_t[]){NPTS, DOUT}, d->t, 1);
    tg_tensor *p[NPARAM] = {tensor(ctx, 2, (int64_t[]){DH, DIN}, d->w1, c), tensor(ctx, 1, (int64_t[]){DH}, d->b1, c),
                            tensor(ctx, 2, (int64_t[]){DOUT, DH}, d->w2, 1)};
    for (int k = 0; k < NPARAM; k++) tg_requires_grad(ctx, p[k]);
    tg_tensor *h = tg_linear_fused(ctx, x, p[0], p[1]);
    if (norm) h = tg_rmsnorm_fused(ctx, h, NULL, NULL, 1, 1e-5);
    tg_tensor *loss = tg_mse_loss(ctx, tg_linear_fused(ctx, tg_tanh(ctx, h), p[2], NULL), t);
    *all = top_eigenvalue(ctx, loss, NPARAM, p, iters);
    *first = top_eigenvalue(ctx, loss, 2, p, iters);
    int status = 0;
    if (!tg_ok(ctx)) {
        fprintf(stderr, "hessian: %s\n", tg_error_message(ctx));
        status = 1;
    }
    tg_ctx_free(ctx);
    return status;
}

int main(int argc, char **argv) {
    int iters = 100;
    unsigned long long seed = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: hessian [--iters N] [--seed N]\n");
            return 2;
        }
    }
    draws *d = malloc(sizeof *d);
    tg_ctx *ctx = tg_ctx_new(seed);
    if (!d || !ctx) return 1;
    fill(ctx, d->x, NPTS * DIN, 1.0);
    fill(ctx, d->w1, DH * DIN, 1.0 / sqrt(DIN));
    fill(ctx, d->b1, DH, 0.1);
    fill(ctx, d->w2, DOUT * DH, 1.0 / sqrt(DH));
    /* targets: a fixed smooth function of x */
    for (int i = 0; i < NPTS; i++)
        for (int o = 0; o < DOUT; o++) d->t[i * DOUT + o] = sin(d->x[i * DIN + o] + 0.5 * d->x[i * DIN + o + 2]);
    tg_ctx_free(ctx);
    printf("# top Hessian eigenvalue (largest |lambda|) of a 4-16-2 tanh MLP's MSE loss, W1 and b1 scaled by c\n"
           "# c  all_plain  first_plain  all_rmsnorm  first_rmsnorm\n");
    int status = 0;
    for (int s = -6; s <= 6 && !status; s++) {
        double c = pow(2.0, s / 2.0), ap, fp, an, fn;
        status = measure(d, c, false, iters, &ap, &fp) || measure(d, c, true, iters, &an, &fn);
        if (!status) printf("%.6g %.6e %.6e %.6e %.6e\n", c, ap, fp, an, fn);
    }
    free(d);
    return status;
}
