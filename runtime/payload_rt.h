/* payload_rt.h: finding, mapping and checking the payload (weights +
 * tokenizer) that append_payload put at the end of the executable.
 * Layout in payload.h. LLMCC_PAYLOAD=path maps a bare payload.bin instead
 * (tests, debugging; no footer, so no checksum). */
#ifndef LLMCC_PAYLOAD_RT_H
#define LLMCC_PAYLOAD_RT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "payload.h"

typedef struct {
    const uint8_t *base;          /* payload start (PAYLOAD_ALIGN-aligned mapping) */
    uint64_t size;                /* payload bytes */
    const PayloadHeader *hdr;
    const PayloadTensor *tensors; /* hdr->n_tensors entries */
    const uint8_t *tok_blob;      /* NULL when tok_size is 0 */
    uint64_t tok_size;
    bool has_footer;              /* false for LLMCC_PAYLOAD */
    uint64_t checksum;            /* the footer's, when has_footer */
    char path[4096];              /* the file mapped */
    /* a compressed payload (payload.h): base is the anonymous memory it was
     * decoded into at open, zbase/zsize the mapped compressed bytes */
    bool compressed;
    const uint8_t *zbase;
    uint64_t zsize;
} Payload;

/* Maps and checks the payload (cheap checks only: footer, header, bounds of
 * the table, the tokenizer blob and every tensor). A compressed payload is
 * decoded first, on every core, into anonymous memory. argv0 is the fallback
 * when /proc/self/exe cannot be opened. Returns NULL on success, else a
 * one-line message (static storage). */
const char *payload_open(Payload *p, const char *argv0);
/* Full check: payload_sum (payload.h) of every payload byte (of the
 * compressed bytes, when compressed) against the footer. Returns
 * NULL when it matches (or, without a footer, always), else a message.
 * *sum gets the computed checksum when sum is not NULL. */
const char *payload_verify(const Payload *p, uint64_t *sum);
/* Maps every page of the weights before the model runs (MADV_POPULATE_READ, Linux 5.14 on; elsewhere, or
 * when it fails, a no-op: the first forward call faults them in as before). */
void payload_prefault(const Payload *p);
void payload_close(Payload *p);

const char *payload_dtype_name(uint32_t dtype);
#endif
