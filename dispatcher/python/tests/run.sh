#!/usr/bin/env bash
# Runs the Python client's tests: run.sh [MODULE...], MODULE being wire,
# config, client or stack (test_<MODULE>.py); none = every module.
#
# The dependencies live in a venv outside the clone, made once per version
# of pyproject.toml: ${XDG_CACHE_HOME:-$HOME/.cache}/codefleet/py-client-<hash>.
# The package itself is built and installed afresh for each run into a
# temporary directory, so the tests exercise what `pip install` gives and
# nothing is written into the source tree.
set -euo pipefail

tests="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg="$(dirname "$tests")"
python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3)"

hash="$(sha256sum "$pkg/pyproject.toml" | cut -c1-16)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/codefleet"
venv="$cache/py-client-$hash"
mkdir -p "$cache"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1

# One creator at a time; a venv is used only once it is complete.
exec 9>"$cache/py-client.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # The runtime dependencies as pyproject.toml states them, plus what
    # building the package needs (installed with --no-build-isolation).
    deps="$("$venv/bin/python" - "$pkg/pyproject.toml" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
requires = re.search(r"^requires\s*=\s*\[(.*?)\]", text, re.S | re.M).group(1)
print("\n".join(re.findall(r'"([^"]+)"', block + requires)))
PY
)"
    mapfile -t reqs <<<"$deps"
    "$venv/bin/python" -m pip install --quiet "${reqs[@]}" wheel
    touch "$venv/.complete"
fi
flock -u 9

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
cp "$pkg/pyproject.toml" "$pkg/README.md" "$work/src/"
cp -r "$pkg/codefleet" "$work/src/"
"$venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation --no-index \
    --target "$work/site" "$work/src" >"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; exit 1; }

modules=()
for m in "$@"; do
    [ -f "$tests/test_$m.py" ] || { echo "run.sh: no test module test_$m.py" >&2; exit 2; }
    modules+=("test_$m")
done
[ ${#modules[@]} -gt 0 ] || modules=(discover -s "$tests" -t "$tests")

cd "$tests"
PYTHONPATH="$work/site" "$venv/bin/python" -m unittest "${modules[@]}" -v
