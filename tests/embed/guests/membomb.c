/* Allocates and touches memory until it gets none, then aborts, as a
 * program that does not check would crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every block stays reachable, so the compiler cannot drop the allocations. */
char *volatile keep[4096];

int main(void)
{
    size_t total = 0;
    for (;;) {
        char *p = malloc(1 << 20);
        if (!p) {
            fprintf(stderr, "malloc failed after %zu MiB\n", total >> 20);
            abort();
        }
        memset(p, 1, 1 << 20);
        keep[(total >> 20) % 4096] = p;
        total += 1 << 20;
    }
}
