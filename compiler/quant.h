/* quant.h: element types on the host (quant.c). The conversions round to nearest even (NaN stays NaN), as the
 * kernels' stores do; the block types are runtime/dtypes.h's (runtime/kernels.h gives the layouts). */
#ifndef LLMCC_QUANT_H
#define LLMCC_QUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint16_t cvt_f32_to_bf16(float f);
uint16_t cvt_f32_to_f16(float f);
float cvt_bf16_to_f32(uint16_t h);
float cvt_f16_to_f32(uint16_t h);
/* n values (whole blocks of 32, of 256 for the K-quants) of x quantized into PDT_Q8_0, PDT_Q4_0, PDT_Q4_1,
 * PDT_Q4_K or PDT_Q6_K blocks at out as llama.cpp's reference quantizers do (ggml-quants.c, bit for bit, as
 * llama-quantize without an importance matrix; Q5_K, Q5_0 and Q5_1 have none here) */
void quant_blocks(uint32_t dt, const float *x, size_t n, uint8_t *out);
/* whether quant_blocks quantizes into dt (a block type with a reference quantizer here: --quant takes it) */
bool quant_has_quantizer(uint32_t dt);
/* n values of any block type at in, dequantized into out */
void dequant_blocks(uint32_t dt, const uint8_t *in, size_t n, float *out);
/* v stored little-endian at b: a block's f16 fields */
static inline void put16(uint8_t *b, uint16_t v) { b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); }
#endif
