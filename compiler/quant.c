/* quant.c: element types on the host (quant.h): f32 to and from f16 and bf16 as the GPU rounds, and GGUF's
 * block types: llama.cpp's reference quantizers (ggml-quants.c, bit for bit) and the dequantization of every
 * block type in runtime/dtypes.h. The packer (pack.c), the reference interpreter and llmcc run's harness use
 * them; the kernels' own loads are runtime/kernels.h's. */
#include "quant.h"
#include "payload.h"
#include "util.h"
#include <math.h>
#include <string.h>

/* ---- element conversions ---- */
uint16_t cvt_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* quiet NaN, sign kept */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* F. Giesen's float_to_half_fast3_rtne: exact round to nearest even,
 * subnormals by letting the FPU round on an added magic number. */
uint16_t cvt_f32_to_f16(float f) {
    const uint32_t f32_inf = 255u << 23, f16_max = (127u + 16) << 23;
    const uint32_t magic_u = ((127u - 15) + (23 - 10) + 1) << 23;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = u & 0x80000000u;
    u ^= sign;
    uint16_t o;
    if (u >= f16_max) {
        o = u > f32_inf ? 0x7e00 : 0x7c00;
    } else if (u < (113u << 23)) {
        float fu, magic;
        memcpy(&fu, &u, 4);
        memcpy(&magic, &magic_u, 4);
        fu += magic;
        memcpy(&u, &fu, 4);
        o = (uint16_t)(u - magic_u);
    } else {
        uint32_t odd = (u >> 13) & 1;
        u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
        o = (uint16_t)(u >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

float cvt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float cvt_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else if (e) u = s | ((e + 112) << 23) | (m << 13);
    else if (!m) u = s;
    else { e = 113; while (!(m & 1024)) { m <<= 1; e--; } u = s | (e << 23) | ((m & 1023) << 13); }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- GGUF's block types: ggml-quants.c's reference quantizers, bit for bit (the scale from the block's extreme
 * in f32, the integers from its f32 reciprocal, the scale then stored as f16), and the dequantization ---- */

/* one block of 32: q8_0 {f16 d; int8 qs[32]}, q4_0 {f16 d; uint8 qs[16]}, q4_1 {f16 d; f16 m; uint8 qs[16]},
 * q5_0 {f16 d; uint8 qh[4]; uint8 qs[16]}, q5_1 {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]}; 4-bit value j < 16 in
 * qs[j]'s low nibble, j >= 16 in qs[j - 16]'s high one */
static void quant_block(uint32_t dt, const float *x, uint8_t *b) {
    float amax = 0, max = 0, lo = x[0], hi = x[0];
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        lo = fminf(lo, x[j]); hi = fmaxf(hi, x[j]);
    }
    switch (dt) {
    case PDT_Q8_0: {
        const float s = amax / 127, inv = s ? 1.0f / s : 0.0f;
        put16(b, cvt_f32_to_f16(s));
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)roundf(x[j] * inv);
        return;
    }
    case PDT_Q4_0: {
        const float s = max / -8, inv = s ? 1.0f / s : 0.0f;
        put16(b, cvt_f32_to_f16(s));
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)(x[j] * inv + 8.5f), q1 = (int8_t)(x[j + 16] * inv + 8.5f);
            b[2 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
        return;
    }
    case PDT_Q4_1: {
        const float s = (hi - lo) / 15, inv = s ? 1.0f / s : 0.0f;
        put16(b, cvt_f32_to_f16(s));
        put16(b + 2, cvt_f32_to_f16(lo));
        for (int j = 0; j < 16; j++) {
            int q0 = (int8_t)((x[j] - lo) * inv + 0.5f), q1 = (int8_t)((x[j + 16] - lo) * inv + 0.5f);
            b[4 + j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
        return;
    }
    case PDT_Q5_0:
    case PDT_Q5_1: {   /* 5 bits: the low 4 as q4_0 / q4_1 store them, the fifth of value j bit j of qh */
        const bool q50 = dt == PDT_Q5_0;
        const float s = q50 ? max / -16 : (hi - lo) / 31, inv = s ? 1.0f / s : 0.0f;
        put16(b, cvt_f32_to_f16(s));
        if (!q50) put16(b + 2, cvt_f32_to_f16(lo));
        uint8_t *qh = b + (q50 ? 2 : 4), *qs = qh + 4;
        uint32_t bits = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = q50 ? (int8_t)(x[j] * inv + 16.5f) : (uint8_t)((x[j] - lo) * inv + 0.5f);
            int q1 = q50 ? (int8_t)(x[j + 16] * inv + 16.5f) : (uint8_t)((x[j + 16] - lo) * inv + 0.5f);
            if (q50) { q0 = q0 < 31 ? q0 : 31; q1 = q1 < 31 ? q1 : 31; }
            qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            bits |= (uint32_t)(q0 >> 4 & 1) << j | (uint32_t)(q1 >> 4 & 1) << (j + 16);
        }
        for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(bits >> 8 * k);
        return;
    }
    default: CHECK(0, "quantize into dtype %u", dt);
    }
}

/* The K-quants' super-blocks of 256 (ggml-common.h's block_q4_K, block_q5_K, block_q6_K; ggml-quants.c's
 * dequantize_row_q4_K ...). Q4_K {f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]} and Q5_K {f16 d; f16 dmin;
 * uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}: sub-block s < 8 of 32 values has a 6-bit scale and minimum
 * (kq_scale_min), value j of it d * sc * q - dmin * m with q the low (s even) or high (s odd) nibble of
 * qs[32 * (s / 2) + j], plus for Q5_K 16 times bit s of qh[j]. Q6_K {uint8 ql[128]; uint8 qh[64]; int8
 * scales[16]; f16 d}: value e of 256, in half h = e / 128, quarter t = e / 32 % 4, position l = e % 32, is
 * d * scales[e / 16] * (q - 32), q's low 4 bits the low (t < 2) or high nibble of ql[64 h + 32 (t % 2) + l], its
 * high 2 bits bits 2t, 2t + 1 of qh[32 h + l]. */
static void kq_scale_min(const uint8_t *sc, int s, int *scale, int *min) {
    if (s < 4) { *scale = sc[s] & 63; *min = sc[s + 4] & 63; return; }
    *scale = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
    *min = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
}
static void dequant_kblock(uint32_t dt, const uint8_t *b, float *out) {
    const float d = cvt_f16_to_f32((uint16_t)(b[0] | b[1] << 8)), dmin = cvt_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
    if (dt == PDT_Q6_K) {
        const float d6 = cvt_f16_to_f32((uint16_t)(b[208] | b[209] << 8));
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, t = e / 32 % 4, l = e % 32;
            const int lo = (b[64 * h + 32 * (t % 2) + l] >> (t < 2 ? 0 : 4)) & 15;
            const int hi = (b[128 + 32 * h + l] >> 2 * t) & 3;
            out[e] = d6 * (float)(int8_t)b[192 + e / 16] * (float)((lo | hi << 4) - 32);   /* exact: <= 23 bits */
        }
        return;
    }
    const uint8_t *qs = b + (dt == PDT_Q5_K ? 48 : 16), *qh = b + 16;
    for (int s = 0; s < 8; s++) {
        int scale, min;
        kq_scale_min(b + 4, s, &scale, &min);
        const float d1 = d * (float)scale, m1 = dmin * (float)min;
        for (int j = 0; j < 32; j++) {
            int q = (qs[32 * (s / 2) + j] >> (s % 2 ? 4 : 0)) & 15;
            if (dt == PDT_Q5_K) q |= ((qh[j] >> s) & 1) << 4;
            out[32 * s + j] = d1 * (float)q - m1;
        }
    }
}

/* ---- the K-quants' reference quantizers (ggml-quants.c's quantize_row_q4_K_ref and quantize_row_q6_K_ref, which
 * llama-quantize runs when it has no importance matrix), bit for bit: the same f32 operations in the same order
 * (this file is C11, so no multiply-add is contracted; ggml-base is built without FMA instructions either) ---- */

#define KQ_ALL_ZERO 1e-15f   /* ggml's GROUP_MAX_EPS: a sub-block or super-block of smaller values is all zero */

/* ggml's nearest_int: round to nearest, ties to even (the default rounding mode, as its 1.5 * 2^23 trick) */
static int nearest_int(float v) { return (int)lrintf(v); }

/* ggml's make_qkx2_quants for the sub-blocks of Q4_K (32 values, codes 0..QMAX = 15; rmin -1, rdelta 0.1,
 * STEPS 20) and Q5_K (QMAX 31, rmin -0.5, STEPS 15), use_mad false: the codes q, a scale s and a minimum m >= 0 such
 * that s * q - m fits x in the weighted least squares sense. The first fit spreads [min(x, 0), max x] over the
 * codes; then STEPS + 1 trials round x with QMAX + rmin, + 0.1, ... steps over the range from the best minimum so
 * far (ggml's loop reads min as it updates it), each gets its least-squares scale and minimum (the minimum forced
 * to 0, the scale refitted, where it came out positive), and the least weighted squared error wins. Returns the
 * scale, *neg_min gets m. */
static float kq_fit_sub_block(const float *x, const float *w, uint8_t *q, float *neg_min, int QMAX, float rmin,
                              int STEPS) {
    enum { N = 32 };
    const float rdelta = 0.1f;
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < N; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(q, 0, N);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = QMAX / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < N; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        q[i] = (uint8_t)(l < 0 ? 0 : l > QMAX ? QMAX : l);
        const float diff = scale * q[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int step = 0; step <= STEPS; step++) {
        iscale = (rmin + rdelta * step + QMAX) / (max - min);
        uint8_t trial[N];
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < N; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > QMAX ? QMAX : l;
            trial[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float error = 0;
        for (int i = 0; i < N; i++) {
            const float diff = this_scale * trial[i] + this_min - x[i];
            error += w[i] * (diff * diff);
        }
        if (error < best_error) {
            memcpy(q, trial, N);
            best_error = error;
            scale = this_scale;
            min = this_min;
        }
    }
    *neg_min = -min;
    return scale;
}

/* ggml's quantize_row_q4_K_ref and quantize_row_q5_K_ref, one super-block of 256: each sub-block of 32 fitted
 * (weights: the sub-block's RMS plus |x|, so large values count more), the 8 scales and minimums as 6-bit multiples
 * of the largest (f16 d and dmin), packed as kq_scale_min reads them, then every code again from the rounded scale
 * and minimum */
static void quant_k_min(uint32_t dt, const float *x, uint8_t *b) {
    const bool q5 = dt == PDT_Q5_K;
    const int qmax = q5 ? 31 : 15;
    uint8_t q[256];
    float scales[8], mins[8], max_scale = 0, max_min = 0;   /* the minimum is subtracted: scales are >= 0 */
    for (int s = 0; s < 8; s++) {
        const float *xs = x + 32 * s;
        float sum_x2 = 0, weight[32];
        for (int j = 0; j < 32; j++) sum_x2 += xs[j] * xs[j];
        const float rms = sqrtf(sum_x2 / 32);
        for (int j = 0; j < 32; j++) weight[j] = rms + fabsf(xs[j]);
        scales[s] = kq_fit_sub_block(xs, weight, q + 32 * s, &mins[s], qmax, q5 ? -0.5f : -1.0f, q5 ? 15 : 20);
        if (scales[s] > max_scale) max_scale = scales[s];
        if (mins[s] > max_min) max_min = mins[s];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t *sc = b + 4;   /* s < 4: the low 6 bits of sc[s] (scale), sc[s + 4] (minimum); s >= 4: sc[s + 4]'s
                            * nibbles, the top 2 bits in those of sc[s - 4] and sc[s] */
    for (int s = 0; s < 8; s++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[s]), lm = (uint8_t)nearest_int(inv_min * mins[s]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (s < 4) {
            sc[s] = ls;
            sc[s + 4] = lm;
        } else {
            sc[s + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            sc[s - 4] |= (uint8_t)(ls >> 4 << 6);
            sc[s] |= (uint8_t)(lm >> 4 << 6);
        }
    }
    put16(b, cvt_f32_to_f16(max_scale / 63.0f));
    put16(b + 2, cvt_f32_to_f16(max_min / 63.0f));
    const float d = cvt_f16_to_f32((uint16_t)(b[0] | b[1] << 8)), dmin = cvt_f16_to_f32((uint16_t)(b[2] | b[3] << 8));
    for (int s = 0; s < 8; s++) {
        int scale, min;
        kq_scale_min(sc, s, &scale, &min);
        const float ds = d * (float)scale, ms = dmin * (float)min;
        if (!ds) continue;   /* the fit's codes stay, as in ggml */
        for (int j = 0; j < 32; j++) {
            const int l = nearest_int((x[32 * s + j] + ms) / ds);
            q[32 * s + j] = (uint8_t)(l < 0 ? 0 : l > qmax ? qmax : l);
        }
    }
    /* qs[32 p + l]: code l of sub-block 2p in the low nibble, of sub-block 2p + 1 in the high one; Q5_K: their
     * fifth bits bits 2p and 2p + 1 of qh[l] */
    uint8_t *qh = b + 16, *qs = b + (q5 ? 48 : 16);
    if (q5) memset(qh, 0, 32);
    for (int p = 0; p < 4; p++)
        for (int l = 0; l < 32; l++) {
            const int lo = q[64 * p + l], hi = q[64 * p + 32 + l];
            qs[32 * p + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            if (q5) qh[l] |= (uint8_t)((lo >> 4) << (2 * p) | (hi >> 4) << (2 * p + 1));
        }
}

/* Q6_K's codes of a sub-block of 16 for one reciprocal scale: l = round(iscale * x) within -32..31, stored + 32;
 * the sums of make_qx_quants' least squares under weights x^2 (sum w x l, sum w l^2) */
static void q6_k_codes(const float *x, float iscale, uint8_t *q, float *sumlx, float *suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < 16; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        q[i] = (uint8_t)(l + 32);
        const float w = x[i] * x[i];
        *sumlx += w * x[i] * l;
        *suml2 += w * l * l;
    }
}

/* ggml's make_qx_quants (nmax 32, rmse_type 1) for Q6_K's sub-blocks of 16: the value of largest magnitude mapped
 * to code -32, then 18 other reciprocal scales (-(32 + 0.1 i) over it, i = -9..9 but 0), each fit's least-squares
 * scale kept where it explains more (sum w x l)^2 / sum w l^2. Returns the scale; q gets the codes + 32. */
static float q6_k_fit_sub_block(const float *x, uint8_t *q) {
    float max = 0, amax = 0;
    for (int i = 0; i < 16; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < KQ_ALL_ZERO) {
        memset(q, 0, 16);
        return 0.0f;
    }
    float sumlx, suml2;
    q6_k_codes(x, -32 / max, q, &sumlx, &suml2);
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int step = -9; step <= 9; step++) {
        if (!step) continue;
        uint8_t trial[16];
        q6_k_codes(x, -(32 + 0.1f * step) / max, trial, &sumlx, &suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            memcpy(q, trial, 16);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's quantize_row_q6_K_ref, one super-block of 256: the 16 sub-block scales as int8 multiples of the one of
 * largest magnitude (mapped to -128; f16 d), then every code again from its rounded scale; the layout is
 * dequant_kblock's */
static void quant_q6_k(const float *x, uint8_t *b) {
    uint8_t q[256];
    float scales[16], max_scale = 0, max_abs_scale = 0;
    for (int s = 0; s < 16; s++) {
        scales[s] = q6_k_fit_sub_block(x + 16 * s, q + 16 * s);
        if (fabsf(scales[s]) > max_abs_scale) { max_abs_scale = fabsf(scales[s]); max_scale = scales[s]; }
    }
    if (max_abs_scale < KQ_ALL_ZERO) {
        memset(b, 0, 210);
        return;
    }
    const float iscale = -128.0f / max_scale;
    put16(b + 208, cvt_f32_to_f16(1 / iscale));
    int8_t sc[16];
    for (int s = 0; s < 16; s++) {
        const int l = nearest_int(iscale * scales[s]);
        sc[s] = (int8_t)(l < 127 ? l : 127);
        b[192 + s] = (uint8_t)sc[s];
    }
    const float d = cvt_f16_to_f32((uint16_t)(b[208] | b[209] << 8));
    for (int s = 0; s < 16; s++) {
        const float ds = d * sc[s];
        if (!ds) continue;   /* the fit's codes stay, as in ggml */
        for (int j = 0; j < 16; j++) {
            const int l = nearest_int(x[16 * s + j] / ds);
            q[16 * s + j] = (uint8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
        }
    }
    memset(b + 128, 0, 64);
    for (int e = 0; e < 256; e++) {
        const int h = e / 128, t = e / 32 % 4, l = e % 32;
        uint8_t *lo = &b[64 * h + 32 * (t % 2) + l];
        *lo = (uint8_t)(t < 2 ? q[e] & 15 : (*lo & 15) | (q[e] & 15) << 4);
        b[128 + 32 * h + l] |= (uint8_t)(q[e] >> 4 << 2 * t);
    }
}

bool quant_has_quantizer(uint32_t dt) {
    return dt == PDT_Q8_0 || dt == PDT_Q4_0 || dt == PDT_Q4_1 || dt == PDT_Q5_0 || dt == PDT_Q5_1 || dt == PDT_Q4_K ||
           dt == PDT_Q5_K || dt == PDT_Q6_K;
}

void quant_blocks(uint32_t dt, const float *x, size_t n, uint8_t *out) {
    const size_t block = payload_dtype_block(dt), bytes = payload_dtype_bytes(dt);
    const bool whole = block > 1 && n % block == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(quant_has_quantizer(dt) && whole, "quantize %zu values into dtype %u", n, dt);
    for (size_t i = 0; i < n; i += block) {
        uint8_t *b = out + i / block * bytes;
        if (dt == PDT_Q4_K || dt == PDT_Q5_K) quant_k_min(dt, x + i, b);
        else if (dt == PDT_Q6_K) quant_q6_k(x + i, b);
        else quant_block(dt, x + i, b);
    }
}

void dequant_blocks(uint32_t dt, const uint8_t *in, size_t n, float *out) {
    const size_t block = payload_dtype_block(dt), bytes = payload_dtype_bytes(dt);
    const bool whole = block > 1 && n % block == 0;   /* (a % in CHECK's condition would be read as a format) */
    CHECK(dt >= PDT_Q8_0 && dt <= PDT_Q5_1 && whole, "dequantize %zu values of dtype %u", n, dt);
    if (block == 256) {
        for (size_t i = 0; i < n; i += 256) dequant_kblock(dt, in + i / 256 * bytes, out + i);
        return;
    }
    /* Q5_0 {f16 d; uint8 qh[4]; uint8 qs[16]}, Q5_1 {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]}: Q4_0 / Q4_1's
     * nibble plus 16 times bit j of qh (a little-endian uint32), d * (q - 16) or d * q + m */
    const bool q5 = dt == PDT_Q5_0 || dt == PDT_Q5_1, has_min = dt == PDT_Q4_1 || dt == PDT_Q5_1;
    const size_t qs = (has_min ? 4 : 2) + (q5 ? 4 : 0);
    const int offset = dt == PDT_Q4_0 ? 8 : dt == PDT_Q5_0 ? 16 : 0;
    for (size_t i = 0; i < n; i += 32) {
        const uint8_t *b = in + i / 32 * bytes;
        const float d = cvt_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
        const float m = has_min ? cvt_f16_to_f32((uint16_t)(b[2] | b[3] << 8)) : 0.0f;
        const uint32_t qh = q5 ? (uint32_t)b[qs - 4] | (uint32_t)b[qs - 3] << 8 | (uint32_t)b[qs - 2] << 16 |
                                     (uint32_t)b[qs - 1] << 24 : 0;
        for (int j = 0; j < 32; j++) {
            const int q = ((b[qs + j % 16] >> (j < 16 ? 0 : 4)) & 15) | (int)((qh >> j) & 1) << 4;
            out[i + j] = dt == PDT_Q8_0 ? d * (float)(int8_t)b[2 + j] : has_min ? d * (float)q + m
                                                                                 : d * (float)(q - offset);
        }
    }
}
