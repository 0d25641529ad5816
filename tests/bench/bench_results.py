"""Read the labelled RESULT lines the fleet benches write.

A bench prints "RESULT figure key=value ..."; the scripts that run it in
rounds prefix a label ("A e2e_latency p50_us=812 p99_us=..."). read_results()
collects every numeric value by (label, figure, key) so a script can take
medians over its rounds; a key whose values are not numbers (kind=command)
gets no entry at all.
"""
import collections


def read_results(path):
    vals = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 3:
                continue
            label, figure = parts[0], parts[1]
            for kv in parts[2:]:
                if '=' not in kv:
                    continue
                k, v = kv.split('=', 1)
                try:
                    x = float(v)
                except ValueError:
                    continue
                vals[(label, figure, k)].append(x)
    return vals
