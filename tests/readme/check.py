#!/usr/bin/env python3
"""The README's "try it by hand" commands, run as written against the test
stack, each answer checked, so the README cannot drift from what the fleet
does (issue 33).

The block is the first ```sh block after "Try it by hand" in README.md.
Every command in it must have an expectation below, and every expectation a
command: a command added, changed or removed fails this test until the table
follows.  The commands run from the repository root with `bash -c`, after
the block's own `eval "$(deploy/stack.sh env)"`; `build/` is the build under
test (CF_BINARY_DIR: the ASan build in tests/run_all.sh) and `ID` the id the
`--no-wait` command printed.  Expectations read stdout and stderr apart
(`--json` stdout must be one JSON document).  One worker is started for
them with the stack's own script (`deploy/stack.sh up --workers 1`: the
release build's worker, serving the stack's topics exactly as the README's
workers do) and stopped at the end; one that already ran is used and left
running.

Environment: what tests/run_all.sh exports for its stack (CODEFLEET_STATE,
CODEFLEET_KAFKA_PORT, CODEFLEET_REDIS_PORT), CF_BINARY_DIR.  Standard
library only.
"""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def has(*parts):
    """Exit 0 and every part in what it printed (stdout, then stderr)."""
    return lambda out, err, rc: rc == 0 and all(p in out + err for p in parts)


def json_stdout_v(out, err, rc):
    try:
        r = json.loads(out)  # stdout alone: exactly one JSON document
    except ValueError:
        return False
    return rc == 0 and r.get("status") == "success" and str(r.get("stdout", "")).startswith("v")


def cases_pass(out, err, rc):
    return rc == 0 and "cases:    4" in out and "MISMATCH" not in out and out.count(" match") == 4


def three_results(out, err, rc):
    return rc == 0 and len([line for line in out.splitlines() if re.match(r"^\S+\s+\S+\s+(exit|sig)=", line)]) == 3


def an_id(out, err, rc):
    return rc == 0 and re.fullmatch(r"[!-~]{1,128}", out.strip()) is not None


# command as the README writes it -> what its answer must be
EXPECT = {
    'eval "$(deploy/stack.sh env)"': lambda out, err, rc: rc == 0,
    "build/dispatcher/codefleet doctor": has("healthy"),
    "build/dispatcher/codefleet submit -l python --code 'print(6 * 7)'": has("status:   success", "42\n"),
    "build/dispatcher/codefleet submit --timeout-exec 2s --max-stdout 1KiB -- /bin/ls -l /": has("status:   success"),
    "build/dispatcher/codefleet --json submit -l javascript --code 'console.log(process.version)'": json_stdout_v,
    "build/dispatcher/codefleet tail --from-beginning --count 3": three_results,
    "build/dispatcher/codefleet submit --file docs/examples/main.rs --case 'stdin=1 2,expect=3' "
    "--cases docs/examples/more.jsonl": cases_pass,
    "build/dispatcher/codefleet submit -l python --function --input '{\"n\": 7}' --code "
    "'def run(input): return input[\"n\"] ** 2'": has("output:   49"),
    "build/dispatcher/codefleet submit -l c --code-file docs/examples/plot.c --collect 'out/*.png'":
        has("file:     out/plot.png", "wrote out/plot.png (64x32)"),
    "build/dispatcher/codefleet submit --module docs/examples/app.wasm -- arg1 arg2":
        has("hello from wasm, 2 argument(s)"),
    "build/dispatcher/codefleet submit -l js --input '{\"n\": 7}' --code "
    "'function run(input) { return input.n ** 2 }'": has("output:   49"),
    "build/dispatcher/codefleet submit --follow -l python --code 'import time\n"
    "for i in range(5): print(\"step\", i, flush=True); time.sleep(1)'":
        has("step 0\nstep 1\nstep 2\nstep 3\nstep 4\n"),
    "build/dispatcher/codefleet submit -l python --session readme.nb --code 'import math; r = 2'":
        has("status:   success", "session:  cell"),
    "build/dispatcher/codefleet submit -l python --session readme.nb --code 'round(math.pi * r * r, 2)'":
        has("12.57\n", "restored from its saved state"),
    "echo '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}' | build/dispatcher/codefleet mcp":
        has('"execute_code"'),
    "build/dispatcher/codefleet submit --no-wait --stream -l shell --code "
    "'for i in 1 2 3; do echo $i; sleep 1; done'": an_id,
    "build/dispatcher/codefleet follow ID": has("1\n2\n3\n"),
    "build/dispatcher/codefleet submit --no-wait --timeout-exec 10m -- /bin/sleep 600   # prints its id": an_id,
    "build/dispatcher/codefleet cancel ID --reason 'not needed any more' --wait":
        lambda out, err, rc: rc == 9 and "cancelled" in out and "not needed any more" in out,
}


def readme_commands():
    """The commands of the block, comments on their own lines dropped, a
    command spanning lines (a quoted newline) kept whole."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("Try it by hand")
    block = text[text.index("```sh\n", start) + 6:]
    block = block[:block.index("```")]
    cmds, buf = [], ""
    for line in block.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        buf = buf + "\n" + line if buf else line
        try:
            shlex.split(buf, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        cmds.append(buf)
        buf = ""
    if buf:
        cmds.append(buf)
    return cmds


def main():
    if not os.environ.get("CF_TEST_BROKERS"):
        print("skipped: no test stack (eval \"$(deploy/stack.sh env)\")")
        return 0
    cmds = readme_commands()
    missing = [c for c in cmds if c not in EXPECT]
    stale = [c for c in EXPECT if c not in cmds]
    check(not missing, "every README command has an expectation (new or changed: %r)" % missing)
    check(not stale, "every expectation is a README command (gone or changed: %r)" % stale)
    # The wasm module is the one its source builds.
    wat, wasm = (os.path.join(REPO, "docs", "examples", n) for n in ("app.wat", "app.wasm"))
    try:
        built = subprocess.run(["wat2wasm", wat, "--output=-"], capture_output=True, timeout=60)
        same = built.returncode == 0 and built.stdout == open(wasm, "rb").read()
    except OSError as e:
        same = False
        print("wat2wasm: %s (deploy/install.sh installs wabt)" % e)
    check(same, "docs/examples/app.wasm is built from app.wat")

    bindir = os.path.abspath(os.environ.get("CF_BINARY_DIR", os.path.join(REPO, "build")))
    state = os.environ.get("CODEFLEET_STATE", os.path.join(REPO, ".stack"))
    pidfile = os.path.join(state, "workers", "w1.pid")

    def live_pid():
        try:
            with open(pidfile) as f:
                pid = int(f.read().split()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    # The stack's own worker w1, with the README's settings (the release
    # build's worker, as the stack runs it); no metrics port (another stack
    # on this host may hold the default one).  One that already runs is
    # used and left running.
    ours = live_pid() is None
    env = dict(os.environ, CODEFLEET_METRICS_PORT="0")
    env.pop("CODEFLEET_LOG_LEVEL", None)
    up = subprocess.run([os.path.join(REPO, "deploy", "stack.sh"), "up", "--workers", "1"], cwd=REPO, env=env,
                        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    check(up.returncode == 0, "a worker started: %s" % up.stderr.strip().splitlines()[-1:])
    worker = live_pid()
    request_id = None
    try:
        ready = False
        if up.returncode == 0:
            # The worker serves once it reads cancels and the group gave
            # it partitions (its log says both; doctor checks the group).
            log = os.path.join(state, "workers", "w1.log")
            deadline = time.monotonic() + 120
            while not ready and time.monotonic() < deadline:
                with open(log, "rb") as f:
                    text = f.read()
                ready = b"reading cancels from" in text and re.search(rb"assigned [1-9][0-9]* partition", text)
                if not ready:
                    time.sleep(0.1)
            check(bool(ready), "the worker serves (its log says it reads cancels and holds partitions)")
        for cmd in cmds if ready else []:
            if cmd not in EXPECT:
                continue
            run = cmd.replace("build/dispatcher/codefleet", shlex.quote(os.path.join(bindir, "dispatcher", "codefleet")))
            if re.search(r" ID( |$)", run):
                if not request_id:
                    check(False, "%s: no id from the --no-wait command" % cmd)
                    continue
                run = re.sub(r" ID( |$)", lambda m: " %s%s" % (shlex.quote(request_id), m.group(1)), run)
            try:
                p = subprocess.run(["bash", "-c", 'eval "$(deploy/stack.sh env)"\n' + run], cwd=REPO, env=env,
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
                out, err, rc = p.stdout, p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                out, err, rc = str(e.stdout or ""), "timed out after 300 s", -1
            ok = EXPECT[cmd](out, err, rc)
            check(ok, "%s -> exit %d" % (cmd.replace("\n", "\\n"), rc))
            if not ok:
                sys.stdout.write("stdout:\n%s\nstderr:\n%s\n" % (out[-3000:], err[-3000:]))
            if "--no-wait" in cmd and out.strip() and rc == 0:
                request_id = out.strip().splitlines()[-1]
        # `up` again: with the same arguments the worker keeps running; with
        # others (a worker flag) it is drained and restarted, and says so.
        if ours and worker and ready:
            again = subprocess.run([os.path.join(REPO, "deploy", "stack.sh"), "up", "--workers", "1"], cwd=REPO,
                                   env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
            check(again.returncode == 0 and "with these arguments" in again.stderr and live_pid() == worker,
                  "stack.sh up again: the worker keeps running (%s)" % again.stderr.strip().splitlines()[-1:])
            changed = dict(env, CODEFLEET_STACK_WORKER_ARGS="--log-level=debug")
            again = subprocess.run([os.path.join(REPO, "deploy", "stack.sh"), "up", "--workers", "1"], cwd=REPO,
                                   env=changed, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
            restarted = live_pid()
            check(again.returncode == 0 and "restarting it" in again.stderr and restarted not in (None, worker),
                  "stack.sh up with another worker flag restarts it (%s)" % again.stderr.strip().splitlines()[-1:])
            worker = restarted or worker
    finally:
        # A sleep the cancel did not reach is not left holding the worker.
        if request_id:
            subprocess.run([os.path.join(bindir, "dispatcher", "codefleet"), "cancel", request_id], cwd=REPO, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        # Only a worker this test started: the stack stays for the others.
        if ours and worker:
            try:
                os.kill(worker, signal.SIGTERM)
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    os.kill(worker, 0)
                    time.sleep(0.1)
                os.kill(worker, signal.SIGKILL)
            except OSError:
                pass
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
