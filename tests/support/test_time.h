/* Wall-clock ceilings that stretch under software emulation: the qemu
 * guest of tests/vm/run.sh sets CF_TEST_TIME_SCALE (tests/vm/guest.sh),
 * where a program's start-up takes many times its native time, so a
 * ceiling that is generous on a host (a hostile program that must fill
 * its output cap within its time limit) is not in the guest.  Unset or
 * malformed: 1.  Only ceilings use it, never what a test asserts a
 * control enforces.  Header-only: the unit tests link no test library. */
#ifndef CF_TEST_TIME_H
#define CF_TEST_TIME_H

#include <stdint.h>
#include <stdlib.h>

static inline int64_t cf_test_time_scale(void)
{
    const char *s = getenv("CF_TEST_TIME_SCALE");
    long v = s ? strtol(s, NULL, 10) : 1;
    return v >= 1 && v <= 100 ? (int64_t)v : 1;
}

#endif
