/* payload.h: the layout of the weights + tokenizer payload that the
 * compiler appends to the executable, and that the runtime mmaps from
 * /proc/self/exe. Shared, byte for byte, by compiler/pack.c and runtime/.
 *
 * File layout of an executable:
 *   [ELF image][zero pad to 64 KiB][payload][PayloadFooter]
 * Payload layout (offsets relative to the payload start, all little-endian):
 *   PayloadHeader
 *   PayloadTensor[n_tensors]
 *   tokenizer blob (tok_size bytes, format in runtime/tokenizer.h)
 *   tensor data, each tensor aligned to PAYLOAD_ALIGN
 */
#ifndef LLMCC_PAYLOAD_H
#define LLMCC_PAYLOAD_H
#include <stdint.h>

#define PAYLOAD_MAGIC   "LLMCCWT1"    /* 8 bytes, no NUL stored */
#define FOOTER_MAGIC    "LLMCCEND"
#define PAYLOAD_VERSION 1u
#define PAYLOAD_ALIGN   65536u        /* allows huge pages; mmap-able offsets */

enum { PDT_F32 = 0, PDT_F16 = 1, PDT_BF16 = 2, PDT_I32 = 3 };

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
    uint64_t checksum;         /* FNV-1a 64 over the payload bytes */
    uint64_t reserved[3];
} PayloadFooter;               /* 64 bytes, the last bytes of the file */

#ifdef __cplusplus
static_assert(sizeof(PayloadFooter) == 64, "footer is 64 bytes");
static_assert(sizeof(PayloadTensor) == 168, "tensor entry size");
#else
_Static_assert(sizeof(PayloadFooter) == 64, "footer is 64 bytes");
_Static_assert(sizeof(PayloadTensor) == 168, "tensor entry size");
#endif
#endif
