/* payload.h: the layout of the weights + tokenizer payload that the
 * compiler appends to the executable, and that the runtime mmaps from
 * /proc/self/exe. Shared, byte for byte, by compiler/pack.c and runtime/.
 *
 * File layout of an executable:
 *   [ELF image][zero pad to 64 KiB][payload][PayloadFooter][section names][section headers][PayloadFooter]
 * The payload and the footer after it are an ELF section of their own (PAYLOAD_SECTION), so that strip keeps
 * them (it drops what follows the sections and may move them: the runtime then finds the section); the section
 * names and headers are the ELF image's with that section added; the last 64 bytes are the footer again, where
 * the runtime looks first. The payload is raw (mmapped as is) or compressed (ZPayloadHeader
 * below; decoded at start into memory holding the raw payload).
 * Payload layout (offsets relative to the payload start, all little-endian):
 *   PayloadHeader
 *   PayloadTensor[n_tensors]
 *   tokenizer blob (tok_size bytes, format in runtime/tokenizer.h)
 *   tensor data, each tensor aligned to PAYLOAD_ALIGN
 */
#ifndef LLMCC_PAYLOAD_H
#define LLMCC_PAYLOAD_H
#include <assert.h>             /* static_assert, in C11 as in C++ */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "dtypes.h"

#define PAYLOAD_MAGIC   "LLMCCWT1"    /* 8 bytes, no NUL stored */
#define FOOTER_MAGIC    "LLMCCEND"
#define PAYLOAD_VERSION 1u
#define PAYLOAD_ALIGN   65536u        /* allows huge pages; mmap-able offsets */
#define PAYLOAD_SECTION ".llmcc.payload"   /* the ELF section holding the payload and its footer (strip keeps it) */

/* A tensor's dtype code is its row in dtypes.h (PDT_F32 = 0, ... PDT_Q5_1 = 11): the block types are GGUF's
 * (ggml's block_q8_0 ... 32 values a block; the K-quants super-blocks of 256), the last dimension whole blocks. */
#define DTYPE_PDT_ENUM(id, name, bytes, block, ggml) PDT_##id,
enum { ALL_DTYPES(DTYPE_PDT_ENUM) PDT_COUNT };
/* rows are only appended: a payload written earlier keeps its meaning */
static_assert(PDT_BF16 == 2 && PDT_Q8_0 == 4 && PDT_Q6_K == 9 && PDT_Q5_1 == 11, "dtypes.h's rows moved");
/* Bytes per block (per element for the scalar types) of a PDT_* dtype, 0 for an unknown one. */
static inline size_t payload_dtype_bytes(uint32_t dt) {
    static const uint8_t bytes[] = {ALL_DTYPES(DTYPE_BYTES)};
    return dt < PDT_COUNT ? bytes[dt] : 0;
}
/* Elements per block: 1 for the scalar types (and an unknown one). */
static inline size_t payload_dtype_block(uint32_t dt) {
    static const uint16_t block[] = {ALL_DTYPES(DTYPE_BLOCK)};
    return dt < PDT_COUNT ? block[dt] : 1;
}
/* Bytes of count elements of dt, 0 where count is not whole blocks (or dt unknown); *overflow where the
 * size does not fit in 64 bits. */
static inline uint64_t payload_tensor_bytes(uint32_t dt, uint64_t count, int *overflow) {
    uint64_t es = payload_dtype_bytes(dt), blk = payload_dtype_block(dt);
    *overflow = 0;
    if (!es || count % blk) return 0;
    if (count / blk > UINT64_MAX / es) { *overflow = 1; return 0; }
    return count / blk * es;
}

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t n_tensors;
    uint64_t table_off;        /* PayloadTensor[n_tensors] */
    uint64_t tok_off, tok_size;
    uint64_t data_off;         /* first tensor's data */
    uint64_t total_size;       /* whole payload, header to last tensor's end */
    uint64_t reserved[4];
} PayloadHeader;

typedef struct {
    char name[112];            /* NUL-terminated, e.g. "model.layers.0.self_attn.q_proj.weight" */
    uint32_t dtype;            /* PDT_* */
    uint32_t ndim;
    uint64_t shape[4];
    uint64_t offset;           /* relative to the payload start; multiple of PAYLOAD_ALIGN */
    uint64_t nbytes;
} PayloadTensor;

typedef struct {
    char magic[8];             /* FOOTER_MAGIC */
    uint32_t version;
    uint32_t reserved0;
    uint64_t payload_offset;   /* from the start of the executable file; multiple of PAYLOAD_ALIGN */
    uint64_t payload_size;
    uint64_t checksum;         /* payload_sum over the payload bytes (below) */
    uint64_t reserved[3];
} PayloadFooter;               /* 64 bytes, the last bytes of the file */

static_assert(sizeof(PayloadFooter) == 64, "footer is 64 bytes");
static_assert(sizeof(PayloadTensor) == 168, "tensor entry size");

/* A compressed payload (llmcc build --compress; append_payload --compress)
 * stands where the raw one would, and decompresses to it, byte for byte:
 *   ZPayloadHeader
 *   frames: zstd frames, one per frame_size bytes of the raw payload
 *   ZFrame[n_frames]   (the last n_frames * 24 bytes)
 * Frames are independent, so the runtime decodes them in parallel. A frame
 * that starts inside an f16 / bf16 tensor is stored as two byte planes (all
 * low bytes, then all high bytes): the high bytes (sign, exponent) compress
 * well, the low ones hardly, and mixed they hide each other's redundancy. */
#define ZPAYLOAD_MAGIC  "LLMCCZ01"
typedef struct {
    char magic[8];
    uint32_t version;          /* PAYLOAD_VERSION */
    uint32_t n_frames;
    uint64_t raw_size;         /* bytes of the raw payload */
    uint64_t frame_size;       /* raw bytes per frame; the last frame may be shorter */
    uint64_t reserved[4];
} ZPayloadHeader;              /* 64 bytes */
typedef struct {
    uint64_t comp_off;         /* from the compressed payload's start */
    uint64_t comp_size;
    uint32_t planes;           /* 1: bytes as they are; 2: low-byte plane, then high-byte plane */
    uint32_t reserved;
} ZFrame;                      /* 24 bytes */
static_assert(sizeof(ZPayloadHeader) == 64 && sizeof(ZFrame) == 24, "compressed payload layout");

/* The footer's checksum: four lanes over little-endian 64-bit words, each
 * step xor, rotate (so high bits reach low ones) and multiply by the FNV-1a
 * prime, then the tail bytes and the lanes folded FNV-1a style. Every step
 * is a bijection of the lane, so any one damaged word is always caught; it
 * runs at memory speed where byte-wise FNV-1a needs ~1 min for 15 GB. */
typedef struct { uint64_t h[4], total; uint8_t tail[32]; unsigned ntail; } PayloadSum;
#define PSUM_PRIME 0x100000001b3ull
static inline uint64_t psum_rotl(uint64_t x) { return (x << 23) | (x >> 41); }
static inline void payload_sum_init(PayloadSum *s) {
    memset(s, 0, sizeof *s);
    for (int j = 0; j < 4; j++) s->h[j] = 0xcbf29ce484222325ull + (uint64_t)j;
}
static inline void psum_block(PayloadSum *s, const uint8_t *p) {
    for (int j = 0; j < 4; j++) {
        uint64_t w;
        memcpy(&w, p + 8 * j, 8);
        s->h[j] = psum_rotl(s->h[j] ^ w) * PSUM_PRIME;
    }
}
static inline void payload_sum_update(PayloadSum *s, const void *data, size_t n) {
    const uint8_t *p = (const uint8_t *)data;
    s->total += n;
    if (s->ntail) {
        size_t k = 32 - s->ntail < n ? 32 - s->ntail : n;
        memcpy(s->tail + s->ntail, p, k);
        s->ntail += (unsigned)k; p += k; n -= k;
        if (s->ntail < 32) return;
        psum_block(s, s->tail);
        s->ntail = 0;
    }
    for (; n >= 32; p += 32, n -= 32) psum_block(s, p);
    if (n) { memcpy(s->tail, p, n); s->ntail = (unsigned)n; }
}
static inline uint64_t payload_sum_final(const PayloadSum *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned i = 0; i < s->ntail; i++) h = (h ^ s->tail[i]) * PSUM_PRIME;
    for (int j = 0; j < 4; j++) h = psum_rotl(h ^ s->h[j]) * PSUM_PRIME;
    return (h ^ s->total) * PSUM_PRIME;
}
#endif
