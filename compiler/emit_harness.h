/* emit_harness.h: a standalone program that runs one compiled graph (an
 * expression, or one decoder layer) once or in a timing loop. Used by
 * `llmcc run` and printed by `llmcc compile -c EXPR --ir c|cuda`.
 *   ./harness DIR ITERS PROFILE [N POS [COLD]]
 * reads every input and weight (and with cache_files the KV caches) from
 * DIR/<harness_leaf_file>, raw in the buffer's dtype, writes the output
 * (f32) to DIR/out.bin, and with ITERS > 0 (or -1: as many as fit in about
 * half a second) prints
 *   time SECONDS_PER_ITER ITERS
 *   launch INDEX KERNEL SECONDS_PER_ITER        (PROFILE 1: one line per launch)
 * COLD 1 (llmcc run --cold): before each timed call, twice the last-level cache (the GPU's L2) is written, so that
 * the call reads its weights from memory as a whole model's step does (its weights far exceed the cache); the
 * time is then the sum of the call's launches. */
#ifndef LLMCC_EMIT_HARNESS_H
#define LLMCC_EMIT_HARNESS_H
#include "emit.h"

typedef struct {
    Target target;
    const char *title;         /* what it computes, for the header comment */
    int n, pos;                /* defaults for the runtime scalars (layer graphs) */
    bool cache_files;          /* the KV caches start as files (rows before pos filled), not zeros */
} HarnessOptions;

void emit_harness(Str *o, const KProgram *kp, const HarnessOptions *ho);
const char *harness_leaf_file(Arena *A, const Buffer *b);
#endif
