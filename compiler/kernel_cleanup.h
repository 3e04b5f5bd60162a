/* kernel_cleanup.h: the tidying pass over kernel IR that runs after
 * materialise (pipeline.c); kernel_cleanup.c says what it does and why. */
#ifndef LLMCC_KERNEL_CLEANUP_H
#define LLMCC_KERNEL_CLEANUP_H
#include "kernel_ir.h"

void kernel_cleanup(Arena *A, KProgram *kp);
#endif
