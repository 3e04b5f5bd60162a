/* f16_all.c: runtime/kernels.h's f16_to_f32 of every half (0 .. 65535), as 65536 little-endian f32 bit patterns
 * on stdout, for tests/test_cpu_gemm.py to compare with numpy's conversion */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "kernels.h"

int main(void) {
    static uint32_t bits[65536];
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = f16_to_f32(h);
        memcpy(&bits[h], &f, 4);
    }
    return fwrite(bits, 4, 65536, stdout) == 65536 ? 0 : 1;
}
