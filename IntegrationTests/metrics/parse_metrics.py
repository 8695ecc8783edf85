"""Parses `edgecoder-worker metrics` output with prometheus_client's own text parser
(the one Prometheus' Python ecosystem trusts) and checks Prometheus' naming rules.

    parse_metrics.py FILE [PYTHON-EXPRESSION]

Prints "ok - …"/"not ok - …" lines for the rules. With an expression, evaluates it with
`v(name, **labels)` (a sample's value, None when absent), `types` (family -> type) and
`families` (the parsed families) in scope and exits 0 when it is truthy, 1 otherwise
(printing nothing). Exits 2 when the parser refuses the text.
"""
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

text = open(sys.argv[1], encoding="utf-8").read()
try:
    families = list(text_string_to_metric_families(text))
except Exception as error:  # the parser's errors are ValueError and friends
    print(f"not ok - prometheus_client refused the text: {error!r}")
    sys.exit(2)

samples = {}
for family in families:
    for sample in family.samples:
        samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
types = {family.name: family.type for family in families}


def v(name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


if len(sys.argv) > 2:
    sys.exit(0 if eval(sys.argv[2]) else 1)

problems = [] if families else ["no metric family at all"]
for family in families:
    if not family.name.startswith("edgecoder_worker_") or not NAME.match(family.name):
        problems.append(f"{family.name}: not a prefixed Prometheus name")
    if family.type not in ("counter", "gauge"):
        problems.append(f"{family.name}: type {family.type}")
    if not family.documentation:
        problems.append(f"{family.name}: no HELP")
    for sample in family.samples:
        if family.type == "counter" and not sample.name.endswith("_total"):
            problems.append(f"{sample.name}: a counter's sample without _total")
        if family.type == "gauge" and sample.name.endswith("_total"):
            problems.append(f"{sample.name}: a gauge named like a counter")
        if family.type == "counter" and sample.value < 0:
            problems.append(f"{sample.name}: a negative counter")
        for label in sample.labels:
            if not LABEL.match(label) or label.startswith("__"):
                problems.append(f"{sample.name}: label name {label!r}")
if problems:
    for problem in problems:
        print(f"not ok - {problem}")
    sys.exit(1)
print(f"ok - prometheus_client parsed {len(families)} families, {len(samples)} samples; names, types, HELP and labels follow Prometheus' rules")
