/* quant.h: GGUF's block types on the compiler's side: rows of f32 quantized
 * into blocks (ggml-quants.c's reference quantizers, bit for bit) and blocks
 * dequantized back. `llmcc run -c` fills block-type weights with them; the
 * kernels dequantize with runtime/kernels.h's ld_q* (independent code, and
 * tests/test_quant.py checks both against gguf-py). */
#ifndef LLMCC_QUANT_H
#define LLMCC_QUANT_H
#include "ir.h"

/* n values (whole blocks) of x into dtype d's blocks at out (dtype_bytes(d, n) bytes) */
void quant_row(DType d, const float *x, int64_t n, uint8_t *out);
/* n values (whole blocks) of dtype d's blocks at in, as f32 */
void dequant_row(DType d, const uint8_t *in, int64_t n, float *out);
#endif
