/* Blocks in a host call (poll_oneoff) past its deadline: the epoch cannot
 * interrupt it, the worker's watchdog must.  argv[1]: milliseconds
 * (default 30000); it prints a line before and after. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    long ms = argc > 1 ? atol(argv[1]) : 30000;
    printf("going to sleep %ld ms\n", ms);
    fflush(stdout);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    printf("LATE REPLY OF THE SLEEPER\n");
    return 0;
}
