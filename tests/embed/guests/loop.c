/* Never ends on its own: the epoch deadline must stop it. */
int main(void)
{
    volatile unsigned long n = 0;
    for (;;)
        n++;
}
