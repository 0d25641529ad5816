#!/usr/bin/env bash
# Prints the compilers this host has for the worker's compiled languages, one
# per line as name=value: an absolute path, or an empty value when missing.
# go is resolved with realpath (/usr/bin/go is a symlink into its GOROOT);
# gcc and g++ keep their driver names.  With --versions, also
# name_version=... lines (the worker finds the versions itself: those are
# for people).
#
#   cc=/usr/bin/gcc  cxx=/usr/bin/g++  rustc=/usr/bin/rustc  go=/usr/lib/go-1.19/bin/go
#   tsc=<CODEFLEET_TOOLCHAINS>/typescript/node_modules/typescript/bin/tsc
#   node=/usr/bin/node  (runs tsc and its output)
#
# Only the system's copies count (Debian's under /usr, deploy/install.sh's
# TypeScript), PATH is not consulted: the worker runs them as unprivileged
# uids in a sandbox that binds /usr from the host, where a rustup toolchain
# under a home directory, say, is not there.
set -euo pipefail
# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

versions=0
case ${1:-} in
'') ;;
--versions) versions=1 ;;
-h | --help)
    sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*) cf_die "unknown argument '$1' (see --help)" ;;
esac

tool() { # name resolve(0|1) path version-args...
    local name=$1 resolve=$2 path=$3 real='' v=''
    shift 3
    if [[ -f $path && -x $path ]]; then
        real=$path
        ((resolve)) && { real=$(realpath -e "$path" 2>/dev/null) || real=''; }
    fi
    printf '%s=%s\n' "$name" "$real"
    ((versions)) || return 0
    [[ -n $real ]] && v=$("$real" "$@" 2>/dev/null </dev/null | head -n 1) || v=''
    printf '%s_version=%s\n' "$name" "$v"
}

tool cc 0 /usr/bin/gcc -dumpfullversion
tool cxx 0 /usr/bin/g++ -dumpfullversion
tool rustc 1 /usr/bin/rustc --version
tool go 1 /usr/bin/go version
tool tsc 1 "$CF_TS_HOME/node_modules/typescript/bin/tsc" --version
tool node 1 /usr/bin/node --version
