/* The runner every exercise shares: checks the learner's op with
 * tg_gradcheck (float64, every element) and, when it fails, prints for
 * each failing input the diagnosis of tg_gradcheck_diagnose (where, what
 * structure, the likely cause) and where the derivation is.
 *
 * Exit status: 0 the backward is right, 1 it is not (or not written yet),
 * 2 bad usage, 3 an error while checking (printed). */
#ifndef TG_EXERCISE_H
#define TG_EXERCISE_H

#include "tapegrad.h"
#include "tapegrad/check.h"

typedef struct tg_exercise {
    const char *name;  /* "rmsnorm (a): RMSNorm without gamma" */
    const char *guide; /* "docs/normalization-gradients.md, section 3" */
    tg_gradcheck_fn f; /* the learner's op on inputs */
    void *user;
    int n_inputs;
    tg_tensor *inputs[TG_GRADCHECK_MAX_INPUTS];
    const char *input_names[TG_GRADCHECK_MAX_INPUTS];
    uint32_t check; /* inputs to check (bit k); 0: all */
} tg_exercise;

/* Parses argv (--seed N, --help), lets make_inputs fill e's inputs from a
 * context seeded with the seed, runs the check and prints the verdict.
 * Returns the exit status. */
int tg_exercise_main(int argc, char **argv, tg_exercise *e, bool (*make_inputs)(tg_ctx *ctx, tg_exercise *e));

#endif
