/* Blocks in a host call (poll_oneoff) far past any deadline: the epoch
 * cannot interrupt it, the worker's watchdog must. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    printf("going to sleep\n");
    fflush(stdout);
    sleep(30);
    printf("woke up\n");
    return 0;
}
