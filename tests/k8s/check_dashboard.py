#!/usr/bin/env python3
"""Checks the Grafana dashboard (deploy/grafana/codefleet.json) against a
worker's /metrics.

    tests/k8s/check_dashboard.py [--dashboard FILE] [SCRAPE]
    curl -s http://WORKER:9464/metrics > scrape.txt && tests/k8s/check_dashboard.py scrape.txt

Always: the file is valid JSON, a dashboard (schemaVersion, panels), every
panel but rows has targets with a PromQL expression, every panel and target
uses the ${DS_PROMETHEUS} data source, panel ids are unique.  With SCRAPE (a
Prometheus text-format scrape of a real worker): every metric name used in
an expression is present in it; a family declared by `# TYPE` counts even
without samples (a labelled counter before its first event), and the
_bucket, _sum and _count series of a declared histogram (or summary) count
as present.  --list prints the metric names the dashboard uses;
--promql-rules FILE writes every expression (Grafana variables replaced)
as a Prometheus recording rule, for `promtool check rules FILE` to parse
with Prometheus's own PromQL parser.

Exit 0 when everything holds, 1 otherwise (each problem on its own line).
Python 3 standard library only.
"""
import argparse
import json
import re
import sys

# PromQL words that look like metric names but are not.
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan", "atan2", "start", "end",
}
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr):
    """The metric names a PromQL expression selects."""
    s = expr
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)          # string literals
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"\$\{[^}]*\}|\$[a-zA-Z_][a-zA-Z0-9_]*", " 1 ", s)  # Grafana variables
    s = re.sub(r"\{[^}]*\}", " ", s)                     # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)                    # ranges, subqueries
    # label lists of grouping and matching modifiers
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", s)
    names = set()
    for m in IDENT.finditer(s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("("):               # a function call
            continue
        if word.lower() in KEYWORDS:
            continue
        # a number's exponent or unit (1e3, 5m) is not an identifier start
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue
        names.add(word)
    return names


def parse_scrape(text):
    """Metric names present in a Prometheus text-format scrape."""
    present, types = set(), {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = IDENT.match(line)
        if m:
            present.add(m.group(0))
    for name, kind in types.items():
        present.add(name)
        if kind in ("histogram", "summary"):
            present.update({name + "_bucket", name + "_sum", name + "_count", name + "_created"})
        if kind == "counter":
            present.add(name + "_created")
    return present, types


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels") or [])


def check_dashboard(dash):
    """Structural problems, and the names used by each panel."""
    problems, used = [], {}
    if not isinstance(dash, dict):
        return ["not a JSON object"], used
    if not isinstance(dash.get("schemaVersion"), int):
        problems.append("no schemaVersion")
    if not isinstance(dash.get("panels"), list) or not dash["panels"]:
        problems.append("no panels")
        return problems, used
    inputs = {i.get("name") for i in dash.get("__inputs", [])}
    tvars = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    if "DS_PROMETHEUS" not in inputs | tvars:
        problems.append("no DS_PROMETHEUS input or template variable")
    ids = set()
    for p in walk_panels(dash["panels"]):
        title = p.get("title") or "(untitled)"
        pid = p.get("id")
        if pid in ids:
            problems.append("panel %r: id %r used twice" % (title, pid))
        ids.add(pid)
        if "gridPos" not in p:
            problems.append("panel %r: no gridPos" % title)
        if p.get("type") == "row":
            continue
        ds = (p.get("datasource") or {}).get("uid")
        if ds != "${DS_PROMETHEUS}":
            problems.append("panel %r: datasource %r, not ${DS_PROMETHEUS}" % (title, ds))
        targets = p.get("targets") or []
        if not targets:
            problems.append("panel %r: no targets" % title)
        for t in targets:
            expr = (t.get("expr") or "").strip()
            if not expr:
                problems.append("panel %r target %s: no expr" % (title, t.get("refId")))
                continue
            if (t.get("datasource") or {}).get("uid") != "${DS_PROMETHEUS}":
                problems.append("panel %r target %s: datasource is not ${DS_PROMETHEUS}" % (title, t.get("refId")))
            if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}"):
                problems.append("panel %r target %s: unbalanced brackets: %s" % (title, t.get("refId"), expr))
            names = metric_names(expr)
            if not names:
                problems.append("panel %r target %s: selects no metric: %s" % (title, t.get("refId"), expr))
            for n in names:
                used.setdefault(n, set()).add(title)
    return problems, used


# Values for Grafana's variables when an expression is checked on its own.
VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "group": ".*"}


def substitute(expr):
    def one(m):
        name = m.group(1) or m.group(2)
        return VARIABLES.get(name.split(":")[0], "x")
    return re.sub(r"\$\{([^}]*)\}|\$([a-zA-Z_][a-zA-Z0-9_]*)", one, expr)


def write_rules(dash, path):
    rules = []
    for p in walk_panels(dash.get("panels") or []):
        for t in p.get("targets") or []:
            if t.get("expr"):
                rules.append({"record": "codefleet_dashboard:panel%s:%s" % (p.get("id"), t.get("refId", "A")),
                              "expr": substitute(t["expr"])})
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"groups": [{"name": "codefleet-dashboard", "rules": rules}]}, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", default=None, help="dashboard JSON (default: deploy/grafana/codefleet.json)")
    ap.add_argument("--list", action="store_true", help="print the metric names the dashboard uses")
    ap.add_argument("--promql-rules", metavar="FILE", help="write the expressions as recording rules (for promtool check rules)")
    ap.add_argument("scrape", nargs="?", help="a /metrics scrape of a running worker")
    a = ap.parse_args(argv)
    path = a.dashboard
    if path is None:
        import os
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "grafana", "codefleet.json")
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        print("%s: %s" % (path, e))
        return 1
    problems, used = check_dashboard(dash)
    if a.promql_rules:
        write_rules(dash, a.promql_rules)
    if a.list:
        for n in sorted(used):
            print(n)
    if a.scrape:
        try:
            with open(a.scrape, encoding="utf-8") as f:
                present, types = parse_scrape(f.read())
        except OSError as e:
            print("%s: %s" % (a.scrape, e))
            return 1
        if not present:
            problems.append("%s: no metrics in it (not a Prometheus text-format scrape?)" % a.scrape)
        for n in sorted(used):
            if n not in present:
                problems.append("metric %s (panels: %s) is not in %s" % (n, ", ".join(sorted(used[n])), a.scrape))
    for p in problems:
        print(p)
    if not problems and not a.list:
        print("%s: %d metric names in %d panels%s" % (
            path, len(used), sum(1 for p in walk_panels(dash["panels"]) if p.get("type") != "row"),
            (", all present in " + a.scrape) if a.scrape else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
