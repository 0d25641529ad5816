#!/usr/bin/env bash
# The house's rules a compiler does not check (docs/ARCHITECTURE.md):
#   - a folder-private header (*_int.h) is included only from its own
#     folder (tests/ test internals and may include them);
#   - nothing outside schema/ writes msgpack bytes by hand (cf_msgpack.h
#     has the writers; msgpack-c's packer is fine);
#   - worker/worker.c stays at most 1,200 lines, and no production C file
#     grows past 2,000;
#   - no production function is longer than 150 lines (one step of a
#     lifecycle should fit on a reviewer's screen or two; the longest were
#     split at their seams, see tests/lint/function_lengths.py).
# Prints each breach and "N passed, N failed".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { printf 'check_layout: %s\n' "$*"; fail=$((fail + 1)); }

files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*' | sed 's|^\./||')

# 1. private headers stay home
breach=0
while IFS= read -r f; do
    case $f in tests/*) continue ;; esac
    dir=$(dirname "$f")
    while IFS= read -r h; do
        [[ -n $h ]] || continue
        if [[ ! -f $dir/$h ]]; then
            bad "$f includes $h, private to another folder"
            breach=1
        fi
    done < <(sed -n 's/^#include "\([^"/]*_int\.h\)".*/\1/p' "$f")
done <<<"$files"
((breach)) || ok

# 2. msgpack by hand only in schema/
hand=$(grep -nE '0x(a0|d9|c0|8[0-9a-f]|9[0-9a-f])[;, )|]' $(grep -v '^schema/\|^tests/' <<<"$files" | grep '\.c$') 2>/dev/null |
       grep -iE 'msgpack|fixstr|fixmap|nil|map[0-9]|hdr\[' || true)
if [[ -n $hand ]]; then bad "msgpack written by hand outside schema/:"$'\n'"$hand"; else ok; fi

# 3. file sizes
n=$(wc -l <worker/worker.c)
if ((n > 1200)); then bad "worker/worker.c has $n lines (at most 1,200)"; else ok; fi
big=0
while IFS= read -r f; do
    case $f in tests/*) continue ;; esac
    [[ $f == *.c ]] || continue
    l=$(wc -l <"$f")
    if ((l > 2000)); then bad "$f has $l lines (at most 2,000)"; big=1; fi
done <<<"$files"
((big)) || ok

# 4. function lengths
long=$(python3 tests/lint/function_lengths.py --over 150 $(grep -v '^tests/' <<<"$files" | grep '\.c$'))
if [[ -n $long ]]; then bad "functions over 150 lines:"$'\n'"$long"; else ok; fi

echo "$pass passed, $fail failed"
((fail == 0))
