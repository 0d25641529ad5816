/* Arguments, environment, stdin, stdout/stderr, exit code and the
 * structured output of a WASI command. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    printf("hello from wasm\n");
    for (int i = 1; i < argc; i++)
        printf("arg %s\n", argv[i]);
    const char *greet = getenv("GREETING");
    printf("GREETING=%s\n", greet ? greet : "(unset)");
    printf("SECRET=%s\n", getenv("CF_TEST_WORKER_SECRET") ? "leaked" : "(unset)");
    char buf[256];
    size_t n = fread(buf, 1, sizeof(buf) - 1, stdin);
    buf[n] = '\0';
    printf("stdin=%s\n", buf);
    fprintf(stderr, "to stderr\n");
    const char *out = getenv("CODEFLEET_OUTPUT");
    FILE *f = out ? fopen(out, "w") : NULL;
    if (f) {
        fprintf(f, "{\"argc\":%d}", argc);
        fclose(f);
    }
    return argc > 1 && strcmp(argv[1], "fail") == 0 ? 7 : 0;
}
