#!/usr/bin/env bash
# The installed layout (cmake --install): every program and harness lands
# where the installed worker looks for it, the worker finds them relative
# to its own executable (so a staged DESTDIR or a moved prefix works), and
# a build-tree worker still uses the build's own.
#   tests/install/run.sh BUILD_DIR
set -euo pipefail
B=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
S=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok     $*"; pass=$((pass + 1)); }
bad() { echo "FAIL   $*"; fail=$((fail + 1)); }
check() { # check DESCRIPTION COMMAND...
    local what=$1; shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}

DESTDIR=$tmp/stage cmake --install "$B" --prefix /opt/codefleet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; bad "cmake --install"; exit 1; }
P=$tmp/stage/opt/codefleet
for f in bin/codefleet-worker bin/codefleet libexec/codefleet/codefleet-container-init \
    share/codefleet/harness/python.py share/codefleet/harness/javascript.js \
    share/codefleet/harness/typescript.ts share/codefleet/harness/rust.rs \
    share/codefleet/systemd/codefleet-worker@.service share/doc/codefleet/CONFIGURATION-worker.md; do
    check "installed $f" test -e "$P/$f"
done
for h in codefleet-zygote codefleet-embed-helper; do
    if [[ -x $B/backends/$h ]]; then
        check "installed libexec/codefleet/$h (built)" test -x "$P/libexec/codefleet/$h"
    else
        check "no libexec/codefleet/$h (not built)" test ! -e "$P/libexec/codefleet/$h"
    fi
done

# The worker names the helpers it will use on start-up, before it needs a
# broker; with only the process backend the default profile is refused
# right after, so it ends by itself.
helpers_line() { # helpers_line WORKER
    env -i PATH="$PATH" timeout 30 "$1" --brokers=127.0.0.1:9 --backends=process --log-format=text 2>&1 |
        grep -m1 'helpers: ' || true
}
expect_paths() { # expect_paths WHAT LINE HARNESS_DIR INIT
    local what=$1 line=$2
    check "$what: harnesses from $3" grep -qF "harnesses $3," <<<"$line"
    check "$what: container init $4" grep -qF "container init $4," <<<"$line"
    if [[ -x $B/backends/codefleet-zygote ]]; then
        check "$what: zygote next to it" grep -qF "zygote $(dirname "$4")/codefleet-zygote," <<<"$line"
    fi
}

line=$(helpers_line "$P/bin/codefleet-worker")
expect_paths "installed worker" "$line" "$P/share/codefleet/harness" "$P/libexec/codefleet/codefleet-container-init"

# A prefix moved elsewhere still finds its own helpers.
mv "$tmp/stage/opt/codefleet" "$tmp/moved"
line=$(helpers_line "$tmp/moved/bin/codefleet-worker")
expect_paths "moved prefix" "$line" "$tmp/moved/share/codefleet/harness" "$tmp/moved/libexec/codefleet/codefleet-container-init"

# An installed worker missing a helper says so; it never falls back to the
# build tree's (its builder's to write, not root's).
rm "$tmp/moved/libexec/codefleet/codefleet-container-init"
rm -r "$tmp/moved/share/codefleet/harness"
line=$(helpers_line "$tmp/moved/bin/codefleet-worker")
check "installed worker without its container init: none, not the build's" grep -qF "container init (none)," <<<"$line"
check "installed worker without its harnesses: none, not the source tree's" grep -qF "harnesses (none)," <<<"$line"

# The installed unit names the installed worker.
check "installed systemd unit starts /opt/codefleet/bin/codefleet-worker" \
    grep -q '^ExecStart=/opt/codefleet/bin/codefleet-worker ' "$tmp/moved/share/codefleet/systemd/codefleet-worker@.service"

# The build tree's worker uses the build's helpers and the source harnesses.
line=$(helpers_line "$B/worker/codefleet-worker")
expect_paths "build-tree worker" "$line" "$S/backends/languages/harness" "$B/backends/codefleet-container-init"

check "installed codefleet --help runs" sh -c "'$tmp/moved/bin/codefleet' --help >/dev/null"

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
