#!/usr/bin/env bash
# The MCP server's tests against the test stack (needs CF_TEST_BROKERS and
# friends from deploy/stack.sh env, and CF_BINARY_DIR):
#   run.sh session   a scripted JSON-RPC session (standard library only)
#   run.sh sdk       the official MCP Python SDK as an independent client
# The SDK lives in a venv outside the clone, made once per pinned version:
# ${XDG_CACHE_HOME:-~/.cache}/codefleet/mcp-sdk-<version>.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec </dev/null
: "${CF_TEST_BROKERS:?run under the test stack: eval \"\$(deploy/stack.sh env)\"}"
export CF_BINARY_DIR=${CF_BINARY_DIR:-$here/../../build}
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3)

case ${1:-} in
session)
    exec "$py" "$here/session.py"
    ;;
sdk)
    sdk_version=2.3.0 # the SDK under test; a new one is a deliberate change
    venv=${XDG_CACHE_HOME:-$HOME/.cache}/codefleet/mcp-sdk-$sdk_version
    if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c "import mcp" 2>/dev/null; then
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$py" -m venv "$venv.tmp.$$"
        "$venv.tmp.$$/bin/pip" install --quiet --disable-pip-version-check "mcp==$sdk_version"
        mv "$venv.tmp.$$" "$venv"
    fi
    exec "$venv/bin/python" "$here/sdk_client.py"
    ;;
*)
    echo "usage: $0 session|sdk" >&2
    exit 2
    ;;
esac
