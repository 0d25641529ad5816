"""A private corner of the test stack for one MCP test run: unique topics
(with the cancel and output topics), one worker serving them, and the
`codefleet` command line that reaches them.

Environment (set by deploy/stack.sh env / tests/run_all.sh): CF_TEST_BROKERS,
CF_TEST_CLIENT_CONFIG, CF_BINARY_DIR.  Standard library only.
"""
import os
import secrets
import signal
import subprocess
import sys
import time


class Fleet:
    # Workers alive at once get run uids of their own (a worker refuses a
    # range another worker on the host holds): the first keeps the
    # environment's run-uid-base, the k-th alive runs 60000 + 1000 (k - 1)
    # above it (a local stack's workers, which may be up, take 1000 k).
    _live = []

    def __init__(self, prefix, extra=()):
        self.brokers = os.environ["CF_TEST_BROKERS"]
        self.config = os.environ.get("CF_TEST_CLIENT_CONFIG", "")
        bindir = os.environ.get("CF_BINARY_DIR", "build")
        self.cli = os.path.join(bindir, "dispatcher", "codefleet")
        self.worker_bin = os.path.join(bindir, "worker", "codefleet-worker")
        base = "%s-%d-%s" % (prefix, os.getpid(), secrets.token_hex(4))
        self.req, self.res, self.dlq = base + ".req", base + ".res", base + ".dlq"
        self.group = base + ".grp"
        self.worker_id = base + "-w1"
        self.log_path = "/tmp/cf-mcp-%s.log" % base
        self.worker = None
        self.extra = list(extra)  # more worker flags
        # process first (the default); the sandbox too where it can run (root),
        # for what only it offers (workspace file systems).
        self.backends = "process,sandbox" if os.geteuid() == 0 else "process"

    def globals(self):
        """Global options of `codefleet` for these topics."""
        g = ["--brokers", self.brokers, "--request-topic", self.req, "--result-topic", self.res]
        if self.config:
            g = ["--config", self.config] + g
        redis = os.environ.get("CF_TEST_REDIS")
        if redis:
            g += ["--redis", redis]
        return g

    def start(self):
        names = [self.req, self.res, self.dlq, self.req + ".cancel", self.res + ".output"]
        subprocess.run([self.cli] + self.globals() + ["topics", "create", "--partitions", "2"] + names,
                       check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        args = [self.worker_bin, "--brokers=" + self.brokers, "--group=" + self.group,
                "--request-topic=" + self.req, "--result-topic=" + self.res, "--dlq-topic=" + self.dlq,
                "--worker-id=" + self.worker_id, "--log-level=info", "--kafka.session.timeout.ms=6000",
                "--kafka.heartbeat.interval.ms=500", "--backends=" + self.backends,
                "--profile.default.backends=" + self.backends, "--profile.default.network=enabled"]
        args += self.extra
        k = next((i for i, w in enumerate(Fleet._live) if w.poll() is not None), len(Fleet._live))
        if k > 0 and not any(a.startswith("--run-uid-base") for a in self.extra):
            base = int(os.environ.get("CODEFLEET_WORKER_RUN_UID_BASE", "0") or 0) or 100000
            args.append("--run-uid-base=%d" % (base + 60000 + 1000 * (k - 1)))
        if self.config:
            args.insert(1, "--config=" + self.config)
        redis = os.environ.get("CF_TEST_REDIS")
        if redis:
            args.append("--redis=" + redis)
        log = open(self.log_path, "wb")
        self.worker = subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        if k < len(Fleet._live):
            Fleet._live[k] = self.worker
        else:
            Fleet._live.append(self.worker)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.worker.poll() is not None:
                self.dump_log()
                raise RuntimeError("the worker exited with %s" % self.worker.returncode)
            with open(self.log_path, "rb") as f:
                if b"reading cancels from" in f.read():
                    return self
            time.sleep(0.1)
        self.dump_log()
        raise RuntimeError("the worker did not start reading cancels within 60 s")

    def dump_log(self):
        try:
            with open(self.log_path, "rb") as f:
                sys.stderr.write(f.read().decode("utf-8", "replace")[-20000:])
        except OSError:
            pass

    def stop(self):
        if self.worker and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(30)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()
