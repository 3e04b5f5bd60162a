/* kernel_cse.h: the name_indices stage (kernel_cse.c): an integer index expression a block of kernel IR
 * computes more than once becomes a let, read by name (the CPU schedules' kernels). */
#ifndef LLMCC_KERNEL_CSE_H
#define LLMCC_KERNEL_CSE_H
#include "kernel_ir.h"

void kernel_name_indices(Arena *A, KProgram *kp);
#endif
