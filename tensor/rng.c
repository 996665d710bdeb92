/* Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and
 * Shaw, "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
 *
 * One block maps a 128-bit counter and a 64-bit key to 128 random bits with
 * ten rounds of
 *     (L0, R0, L1, R1) -> (hi(M1*R1) ^ L1 ^ k1... ) -- see round() below
 * and a Weyl-sequence key schedule. Because a number is a pure function of
 * (seed, position), any thread can make any element: the values never depend
 * on the thread count or on the order of generation. The way the context's
 * stream maps positions to counters is documented in tapegrad.h. */
#include "tensor/internal.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* One round: two 32x32->64 multiplies; the high halves are mixed with the
 * other two words and the key, the low halves become the new odd words. */
static inline void philox_round(uint32_t x[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * x[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * x[2];
    uint32_t y0 = (uint32_t)(p1 >> 32) ^ x[1] ^ k[0];
    uint32_t y1 = (uint32_t)p1;
    uint32_t y2 = (uint32_t)(p0 >> 32) ^ x[3] ^ k[1];
    uint32_t y3 = (uint32_t)p0;
    x[0] = y0;
    x[1] = y1;
    x[2] = y2;
    x[3] = y3;
}

void tg_philox4x32_10(uint32_t out[4], const uint32_t counter[4], const uint32_t key[2]) {
    uint32_t x[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(x, k);
    }
    out[0] = x[0];
    out[1] = x[1];
    out[2] = x[2];
    out[3] = x[3];
}

void tg_rng_block(const tg_ctx *ctx, uint64_t k, uint32_t out[4]) {
    uint64_t pos = ctx->rng_offset + k;
    uint32_t ctr[4] = {(uint32_t)pos, (uint32_t)(pos >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)ctx->seed, (uint32_t)(ctx->seed >> 32)};
    tg_philox4x32_10(out, ctr, key);
}

void tg_rng_seed(tg_ctx *ctx, uint64_t seed) {
    if (!ctx) return;
    ctx->seed = seed;
    ctx->rng_offset = 0;
}

void tg_rng_state(const tg_ctx *ctx, uint64_t *seed, uint64_t *offset) {
    if (!ctx) return;
    if (seed) *seed = ctx->seed;
    if (offset) *offset = ctx->rng_offset;
}

void tg_rng_set_state(tg_ctx *ctx, uint64_t seed, uint64_t offset) {
    if (!ctx) return;
    ctx->seed = seed;
    ctx->rng_offset = offset;
}

double tg_rng_uniform(tg_ctx *ctx) {
    if (!ctx) return 0.0;
    uint32_t x[4];
    tg_rng_block(ctx, 0, x);
    ctx->rng_offset++;
    return tg_u01_f64(x[0], x[1]);
}

double tg_rng_normal(tg_ctx *ctx) {
    if (!ctx) return 0.0;
    uint32_t x[4];
    tg_rng_block(ctx, 0, x);
    ctx->rng_offset++;
    return tg_normal_from_block(x);
}
