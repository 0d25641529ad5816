// The README's collect example: plots a sine wave into out/plot.png (a
// 64x32 grayscale PNG written by hand: stored deflate blocks, no library)
// for: codefleet submit -l c --code-file docs/examples/plot.c --collect 'out/*.png'

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

enum { W = 64, H = 32 };

static uint32_t crc_table[256];

static uint32_t crc(const uint8_t *p, size_t n, uint32_t c)
{
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

static void chunk(FILE *f, const char *type, const uint8_t *data, uint32_t n)
{
    uint8_t b[8];
    put32(b, n);
    memcpy(b + 4, type, 4);
    fwrite(b, 1, 8, f);
    fwrite(data, 1, n, f);
    uint32_t c = crc(data, n, crc((const uint8_t *)type, 4, 0xffffffffu)) ^ 0xffffffffu;
    put32(b, c);
    fwrite(b, 1, 4, f);
}

int main(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    /* Rows of a filter byte (0) and W pixels: white, the curve black. */
    static uint8_t raw[H * (W + 1)];
    memset(raw, 255, sizeof(raw));
    for (int x = 0; x < W; x++) {
        int y = (int)lround((H - 1) / 2.0 * (1 - sin(x * 2 * M_PI / W)));
        raw[y * (W + 1) + 1 + x] = 0;
    }
    for (int y = 0; y < H; y++)
        raw[y * (W + 1)] = 0;
    /* zlib: header, one stored block (fits in 65535 bytes), Adler-32. */
    static uint8_t z[2 + 5 + sizeof(raw) + 4];
    size_t n = sizeof(raw), o = 0;
    z[o++] = 0x78, z[o++] = 0x01;
    z[o++] = 1, z[o++] = n & 0xff, z[o++] = n >> 8, z[o++] = ~n & 0xff, z[o++] = (~n >> 8) & 0xff;
    memcpy(z + o, raw, n);
    o += n;
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++)
        a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    put32(z + o, b << 16 | a);
    o += 4;
    mkdir("out", 0755);
    FILE *f = fopen("out/plot.png", "wb");
    if (!f) {
        perror("out/plot.png");
        return 1;
    }
    fwrite("\x89PNG\r\n\x1a\n", 1, 8, f);
    uint8_t ihdr[13];
    put32(ihdr, W);
    put32(ihdr + 4, H);
    ihdr[8] = 8, ihdr[9] = 0, ihdr[10] = ihdr[11] = ihdr[12] = 0; /* 8-bit grayscale */
    chunk(f, "IHDR", ihdr, sizeof(ihdr));
    chunk(f, "IDAT", z, (uint32_t)o);
    chunk(f, "IEND", NULL, 0);
    fclose(f);
    printf("wrote out/plot.png (%dx%d)\n", W, H);
    return 0;
}
