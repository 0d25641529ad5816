#!/usr/bin/env python3
"""Function lengths in C files, for tests/lint/check_layout.sh.

Usage: function_lengths.py [--over N] FILE...
Prints "<lines> <file> <function>" for each function definition longer
than N lines (default 150), longest first.  A definition is a line that
starts at column 0 with a name and '(' (not a declaration ending in ';',
not a typedef or a preprocessor line), its body the lines up to the first
'}' at column 0.  That is the layout the project's formatter keeps; a
function written otherwise is not measured, so this is a guide, not a
parser.
"""
import re
import sys

DEF = re.compile(r'^[A-Za-z_].*\(')
NAME = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*\(')


def lengths(path):
    lines = open(path, errors='replace').read().split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        if DEF.match(line) and not line.rstrip().endswith(';') and not line.startswith(('typedef', '#')):
            j = i
            while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
                j += 1
            if j < len(lines) and '{' in lines[j]:
                k = j
                while k < len(lines) and lines[k] != '}':
                    k += 1
                m = NAME.search(line)
                yield k - i + 1, m.group(1) if m else line[:30]
                i = k
        i += 1


def main(argv):
    over = 150
    if len(argv) >= 2 and argv[0] == '--over':
        over = int(argv[1])
        argv = argv[2:]
    found = [(n, f, name) for f in argv for n, name in lengths(f) if n > over]
    for n, f, name in sorted(found, reverse=True):
        print(n, f, name)


if __name__ == '__main__':
    main(sys.argv[1:])
