/* append_payload.c: host tool run by the emitted Makefile.
 *   append_payload ELF PAYLOAD OUT
 * writes OUT = ELF, zero padding to a multiple of PAYLOAD_ALIGN, PAYLOAD,
 * PayloadFooter (with the FNV-1a 64 checksum of the payload), via OUT.tmp. */
#include "payload.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_tmp;
static FILE *g_out;

static _Noreturn void die(const char *fmt, ...) {
    int e = errno;
    if (g_out) fclose(g_out);
    if (g_tmp) unlink(g_tmp);
    fputs("append_payload: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (e) fprintf(stderr, ": %s", strerror(e));
    fputc('\n', stderr);
    exit(1);
}

static uint64_t fnv(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

static unsigned char buf[1 << 20];

/* Copies all of in to g_out; returns the byte count; hashes into *h when h. */
static uint64_t copy(FILE *in, const char *name, uint64_t *h) {
    uint64_t total = 0;
    for (;;) {
        errno = 0;
        size_t n = fread(buf, 1, sizeof buf, in);
        if (n == 0) {
            if (ferror(in)) die("cannot read %s", name);
            break;
        }
        if (h) *h = fnv(*h, buf, n);
        errno = 0;
        if (fwrite(buf, 1, n, g_out) != n) die("cannot write %s", g_tmp);
        total += n;
    }
    return total;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: append_payload ELF PAYLOAD OUT\n");
        return 1;
    }
    const char *elf = argv[1], *pay = argv[2], *out = argv[3];
    size_t ol = strlen(out);
    char *tmp = malloc(ol + 5);
    if (!tmp) die("out of memory");
    memcpy(tmp, out, ol);
    memcpy(tmp + ol, ".tmp", 5);

    errno = 0;
    FILE *fe = fopen(elf, "rb");
    if (!fe) die("cannot open %s", elf);
    FILE *fp = fopen(pay, "rb");
    if (!fp) die("cannot open %s", pay);
    PayloadHeader h;
    struct stat st;
    errno = 0;
    if (fstat(fileno(fp), &st) != 0) die("cannot stat %s", pay);
    errno = 0;
    if (fread(&h, sizeof h, 1, fp) != 1 || memcmp(h.magic, PAYLOAD_MAGIC, 8) != 0 || h.version != PAYLOAD_VERSION)
        die("%s is not an llmcc payload (version %u)", pay, PAYLOAD_VERSION);
    if (h.total_size != (uint64_t)st.st_size)
        die("%s is %llu bytes, its header says %llu (truncated?)", pay,
            (unsigned long long)st.st_size, (unsigned long long)h.total_size);
    rewind(fp);

    g_tmp = tmp;
    errno = 0;
    g_out = fopen(tmp, "wb");
    if (!g_out) die("cannot create %s", tmp);
    uint64_t off = copy(fe, elf, NULL);
    fclose(fe);
    uint64_t pad = (PAYLOAD_ALIGN - off % PAYLOAD_ALIGN) % PAYLOAD_ALIGN;
    memset(buf, 0, sizeof buf);
    errno = 0;
    if (pad && fwrite(buf, 1, (size_t)pad, g_out) != pad) die("cannot write %s", tmp);
    off += pad;
    uint64_t sum = 0xcbf29ce484222325ull;
    uint64_t size = copy(fp, pay, &sum);
    fclose(fp);
    if (size != h.total_size) { errno = 0; die("%s changed while being copied", pay); }

    PayloadFooter f;
    memset(&f, 0, sizeof f);
    memcpy(f.magic, FOOTER_MAGIC, 8);
    f.version = PAYLOAD_VERSION;
    f.payload_offset = off;
    f.payload_size = size;
    f.checksum = sum;
    errno = 0;
    if (fwrite(&f, sizeof f, 1, g_out) != 1 || fflush(g_out) != 0) die("cannot write %s", tmp);
    FILE *o = g_out;
    g_out = NULL;
    errno = 0;
    if (fclose(o) != 0) die("cannot write %s", tmp);
    errno = 0;
    if (chmod(tmp, 0755) != 0) die("cannot chmod %s", tmp);
    if (rename(tmp, out) != 0) die("cannot rename %s to %s", tmp, out);
    free(tmp);
    return 0;
}
