/* run_uids: a worker's claim on its host run uids, so that two workers on
 * one host never share one.
 *
 * Executions run as per-slot host uids (cf_run_uid: run-uid-base plus a
 * block per backend family).  Two workers on one host whose ranges overlap
 * would share uids: the process backend's clean-up kills every process of
 * its slot's uid, so one worker's end of a run SIGKILLed the other's
 * program in mid-run (tests/bench/fair.sh, two workers given one base:
 * "killed by signal 9" on one request in eight); and user namespaces'
 * ownership and the per-user kernel counters would be shared.
 *
 * The claim is an open file description lock (F_OFD_SETLK) on the byte
 * range [first, first + count) of one host file, RUN_UIDS_LOCK: the kernel
 * finds overlaps, and drops the claim when the worker dies, however it
 * dies (nothing to clean up, no stale claim).  Forked children that have
 * not exec'd yet share the description, so a SIGKILLed worker's claim may
 * outlive it for the moments its children take to die: a conflict is
 * waited on for a few seconds before it is refused.  Workers in containers
 * with a /run of their own (pods) cannot see each other's claims; their
 * pid namespaces keep the clean-up apart there (docs/OPERATIONS.md). */
#include "worker_int.h"

#include "cf_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_SUB "worker"
#define RUN_UIDS_DIR "/run/codefleet"
#define RUN_UIDS_LOCK RUN_UIDS_DIR "/run-uids.lock"
#define CONFLICT_WAIT_US (10 * 1000000LL)

static int lock_fd = -1;

int run_uids_claim(int64_t first, int64_t count, cf_error *err)
{
    if (count <= 0)
        return 0;
    if (lock_fd < 0) {
        if (mkdir(RUN_UIDS_DIR, 0755) < 0 && errno != EEXIST) {
            cf_log_warn(LOG_SUB, "run uids %lld..%lld not claimed (%s: %s): give every worker on this host a "
                        "run-uid-base of its own",
                        (long long)first, (long long)(first + count - 1), RUN_UIDS_DIR, strerror(errno));
            return 0;
        }
        lock_fd = open(RUN_UIDS_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (lock_fd < 0) {
            cf_log_warn(LOG_SUB, "run uids %lld..%lld not claimed (%s: %s): give every worker on this host a "
                        "run-uid-base of its own",
                        (long long)first, (long long)(first + count - 1), RUN_UIDS_LOCK, strerror(errno));
            return 0;
        }
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)first, .l_len = (off_t)count};
    int64_t until = cf_mono_us() + CONFLICT_WAIT_US;
    bool told = false;
    while (fcntl(lock_fd, F_OFD_SETLK, &fl) < 0) {
        if (errno != EAGAIN && errno != EACCES) {
            cf_log_warn(LOG_SUB, "run uids %lld..%lld not claimed (%s): give every worker on this host a "
                        "run-uid-base of its own",
                        (long long)first, (long long)(first + count - 1), strerror(errno));
            return 0;
        }
        if (cf_mono_us() >= until)
            return cf_error_set(err, CF_E_INVALID,
                                "run uids %lld..%lld overlap another worker's on this host (%s): its programs and "
                                "this worker's would run as the same uids and could kill each other's; give each "
                                "worker on a host its own run-uid-base (at least 4 x (slots + reserve-slots) apart)",
                                (long long)first, (long long)(first + count - 1), RUN_UIDS_LOCK);
        if (!told)
            cf_log_info(LOG_SUB, "run uids %lld..%lld are another worker's: waiting up to %llds for it to go",
                        (long long)first, (long long)(first + count - 1), CONFLICT_WAIT_US / 1000000LL);
        told = true;
        usleep(50 * 1000);
    }
    cf_log_info(LOG_SUB, "run uids %lld..%lld claimed on this host (%s)", (long long)first,
                (long long)(first + count - 1), RUN_UIDS_LOCK);
    return 0;
}
