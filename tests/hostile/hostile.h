/* hostile: programs that try to harm the host, the worker or the next
 * execution.  One static binary, one subcommand per attack, so a test can
 * ship it into a sandbox as a single request file.
 *
 * Output contract (tests/integration/test_hostile.c parses it): one
 * "key: value" line per observation, written with write(2) at once, so
 * whatever was printed survives a kill.  Errors are printed by errno name
 * ("EPERM"); success of an attack is printed as "ok" or "opened".
 *
 * Everything here is meant to be run either inside the sandbox or, for the
 * "harm without the sandbox" half of a test, under bounds the test sets
 * (cgroup, rlimits, unprivileged uid): the programs themselves keep their
 * host-side effects small and self-contained where that is possible. */
#ifndef HOSTILE_H
#define HOSTILE_H

#include <stddef.h>

#define MiB (1024L * 1024L)

/* Writes one formatted line (or fragment) to stdout, unbuffered. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "EPERM", "ENOENT"...; never NULL. */
const char *ename(int e);
/* Parses a non-negative decimal argument; exits 2 on garbage. */
long arg_long(const char *s);

/* hostile_resources.c: exhaust processes, memory, disk, output, CPU. */
int h_forkbomb(int argc, char **argv);
int h_inotify(int argc, char **argv);
int h_heap(int argc, char **argv);
int h_mmap(int argc, char **argv);
int h_shm(int argc, char **argv);
int h_memfd(int argc, char **argv);
int h_write(int argc, char **argv);
int h_fallocate(int argc, char **argv);
int h_files(int argc, char **argv);
int h_stdout(int argc, char **argv);
int h_stderrline(int argc, char **argv);
int h_cpu(int argc, char **argv);
int h_threads(int argc, char **argv);
int h_sleep(int argc, char **argv);
int h_sigxcpu(int argc, char **argv);

/* hostile_escape.c: syscalls, foreign ABIs, terminals, setuid, signals. */
int h_escape(int argc, char **argv);
int h_int80(int argc, char **argv);
int h_x32(int argc, char **argv);
int h_tiocsti(int argc, char **argv);
int h_suidwait(int argc, char **argv);
int h_whoami(int argc, char **argv);
int h_killer(int argc, char **argv);

/* hostile_info.c: network, secrets, /proc and /sys, fds, planted links,
 * leftovers for the next execution. */
int h_connect(int argc, char **argv);
int h_secrets(int argc, char **argv);
int h_procsys(int argc, char **argv);
int h_fds(int argc, char **argv);
int h_plant(int argc, char **argv);
int h_leave(int argc, char **argv);
int h_look(int argc, char **argv);

#endif
