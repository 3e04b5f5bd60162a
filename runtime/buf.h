/* buf.h: a growable byte buffer that runs out of memory quietly (the oom flag, checked once at the end, in place
 * of a check after every append), and the JSON string writer. The server's connections, its replies and a
 * slot's text are all built in one (http.c, openai.c, serve.c). */
#ifndef LLMCC_BUF_H
#define LLMCC_BUF_H
#include <stdbool.h>
#include <stddef.h>

typedef struct { char *p; size_t len, cap; bool oom; } Buf;   /* p[len] is 0 once anything was added */

void buf_add(Buf *b, const void *data, size_t n);
void buf_str(Buf *b, const char *s);
void buf_fmt(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));   /* up to 511 bytes */
void buf_free(Buf *b);
/* s[0..n) as a JSON string, quotes included (the text is valid UTF-8: the decoder gives U+FFFD for the rest) */
void buf_json_str(Buf *b, const char *s, size_t n);
#endif
