#!/usr/bin/env python3
"""Metric names in the Grafana dashboard's and the alert rules' expressions, and checks on them.

  promql_names.py rules RULES.yml
      every alert has an expression, for:, a severity label, a summary and a description.
  promql_names.py names SCRAPE DASHBOARD.json RULES.yml
      every metric name an expression uses is in SCRAPE (a /metrics text); histogram series
      (_bucket, _sum, _count) count as present when their family is.
  promql_names.py list DASHBOARD.json RULES.yml
      where each expression is and the metric names it uses.

Python's standard library only (no YAML module: the rules file is read line by line, which its
layout allows: "- alert: NAME", then "expr: EXPR" or "expr: |" and an indented block).
"""
import json
import re
import sys

# Words of PromQL that are not metric names when not followed by "(" (functions and aggregations
# that are followed by "(" are skipped anyway).
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "count", "stddev", "stdvar",
    "topk", "bottomk", "quantile", "count_values", "group", "atan2",
}


def metric_names(expr):
    """The metric names @expr selects (Grafana variables and label_values() understood)."""
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    # label_values(SELECTOR, LABEL) / label_values(LABEL): only SELECTOR names a metric.
    e = re.sub(r"\blabel_values\(\s*([^,()]*?)\s*,\s*\w+\s*\)", r"(\1)", e)
    e = re.sub(r"\blabel_values\(\s*\w+\s*\)", " ", e)
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.:])[a-zA-Z_:][\w:]*", e):
        if e[m.end():].lstrip().startswith("(") or m.group(0).lower() in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def dashboard_exprs(path):
    """(where, expression) for every query of the dashboard: panels (rows' too), variables."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append(('panel "%s" (%s)' % (p.get("title", "?"), t.get("refId", "?")),
                                t["expr"]))
            walk(p.get("panels", []))

    walk(d.get("panels", []))
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else q or ""
        if q:
            out.append(('variable "%s"' % v.get("name", "?"), q))
    return d, out


def rules(path):
    """[(alert, {"expr": ..., "for": ..., "severity": ..., "summary": ..., "description": ...})]"""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^\s*- alert:\s*(\S+)\s*$", line)
        if m:
            out.append((m.group(1), {}))
        elif out:
            m = re.match(r"^(\s*)(expr|for|severity|summary|description):\s*(.*?)\s*$", line)
            if m:
                indent, key, val = len(m.group(1)), m.group(2), m.group(3)
                if val in ("|", "|-", ">", ">-"):
                    block = []
                    while i + 1 < len(lines) and (
                        lines[i + 1].strip() == ""
                        or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > indent
                    ):
                        i += 1
                        block.append(lines[i].strip())
                    val = ("\n" if val.startswith("|") else " ").join(block).strip()
                elif len(val) > 1 and val[0] == val[-1] and val[0] in "'\"":
                    val = val[1:-1]
                out[-1][1][key] = val
        i += 1
    return out


def rule_exprs(path):
    return [('alert "%s"' % a, r.get("expr", "")) for a, r in rules(path)]


def scrape_names(path):
    """Sample names and histogram/summary families of a Prometheus text exposition."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^# TYPE (\S+) (\S+)", line)
            if m:
                names.add(m.group(1))
            elif line.strip() and not line.startswith("#"):
                names.add(re.match(r"^[^{\s]+", line).group(0))
    return names


def present(name, scraped):
    if name in scraped:
        return True
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return base != name and base in scraped


def cmd_rules(path):
    bad = []
    found = rules(path)
    if not found:
        bad.append("no alert in %s" % path)
    for alert, r in found:
        for key in ("expr", "for", "severity", "summary", "description"):
            if not r.get(key):
                bad.append('alert "%s" has no %s' % (alert, key))
        if r.get("severity") not in (None, "", "warning", "critical"):
            bad.append('alert "%s": severity %s (warning or critical)' % (alert, r["severity"]))
    for b in bad:
        print("FAIL: " + b)
    if not bad:
        print("ok: %d alerts, each with expr, for, severity, summary and description: %s"
              % (len(found), " ".join(a for a, _ in found)))
    return 1 if bad else 0


def cmd_names(scrape, dash_path, rules_path):
    scraped = scrape_names(scrape)
    dash, exprs = dashboard_exprs(dash_path)
    exprs += rule_exprs(rules_path)
    missing, used = [], set()
    for where, expr in exprs:
        names = metric_names(expr)
        if not names:
            missing.append("%s uses no metric at all: %s" % (where, expr))
        for n in sorted(names):
            used.add(n)
            if not present(n, scraped):
                missing.append("metric %s of %s is not in the scrape (expression: %s)"
                               % (n, where, expr))
    # A data source variable, and no data source given by a fixed uid anywhere.
    text = json.dumps(dash)
    if not any(v.get("type") == "datasource" for v in dash.get("templating", {}).get("list", [])):
        missing.append("the dashboard has no data source variable")
    for uid in re.findall(r'"uid": "([^"]*)"', text):
        if uid != "${datasource}" and uid != dash.get("uid"):
            missing.append('a data source with the fixed uid "%s"' % uid)
    for m in missing:
        print("FAIL: " + m)
    if not missing:
        print("ok: %d expressions (dashboard and alerts) use %d metrics, all in the scrape:"
              % (len(exprs), len(used)))
        for n in sorted(used):
            print("  " + n)
    return 1 if missing else 0


def cmd_list(dash_path, rules_path):
    _, exprs = dashboard_exprs(dash_path)
    for where, expr in exprs + rule_exprs(rules_path):
        print("%s: %s" % (where, " ".join(sorted(metric_names(expr)))))
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "rules":
        return cmd_rules(argv[2])
    if len(argv) == 5 and argv[1] == "names":
        return cmd_names(argv[2], argv[3], argv[4])
    if len(argv) == 4 and argv[1] == "list":
        return cmd_list(argv[2], argv[3])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
