/* pack.h: writes the payload (payload.bin) of an emitted project: header,
 * tensor table, tokenizer blob, then each tensor at a PAYLOAD_ALIGN offset.
 * Layout in runtime/payload.h. Streams: the tensors are written from their
 * (mmapped) sources, never gathered in memory. */
#ifndef LLMCC_PACK_H
#define LLMCC_PACK_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *name;     /* < 112 bytes */
    uint32_t dtype;       /* PDT_* */
    int ndim;             /* 0..4 */
    int64_t shape[4];
    const void *data;     /* nbytes bytes; may be NULL when nbytes is 0 */
    size_t nbytes;        /* must equal prod(shape) * dtype size */
} PackTensor;

/* Writes out_path.tmp, then renames it to out_path. Dies with a user error
 * (and removes the tmp file) on any failure. A progress bar goes to stderr
 * when stderr is a terminal. */
void pack_payload(const char *out_path, const PackTensor *tensors, int n,
                  const uint8_t *tok_blob, size_t tok_size);
#endif
