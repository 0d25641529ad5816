/* Writes 8 MiB to stdout and exits 0: the output cap must hold. */
#include <stdio.h>
#include <string.h>

int main(void)
{
    static char line[1024];
    memset(line, 'x', sizeof(line) - 1);
    for (int i = 0; i < 8192; i++)
        fwrite(line, 1, sizeof(line), stdout);
    return 0;
}
