"""Derive normalize/metric_labels.csv from a pair of real ncu details exports of one report.

The pair is `ncu --import R --csv --page details` and the same with `--print-metric-name name`: their
rows line up one to one, so each (section, display label) gets its metric name from ncu itself.
Usage: python tools/derive_metric_labels.py DETAILS.csv DETAILS.metricnames.csv > metric_labels.csv
"""

import csv
import sys

labels_file, names_file = sys.argv[1:3]
with open(labels_file, newline="") as a, open(names_file, newline="") as b:
    rows_a, rows_b = csv.reader(a), csv.reader(b)
    header = next(rows_a)
    next(rows_b)
    section, metric = header.index("Section Name"), header.index("Metric Name")
    pairs = {}
    for row_a, row_b in zip(rows_a, rows_b):
        if row_a[section] != row_b[section]:
            sys.exit(f"rows differ at line {rows_a.line_num}: not two exports of one report")
        if row_a[metric] and row_a[metric] != row_b[metric]:
            pairs.setdefault((row_a[section], row_a[metric]), set()).add(row_b[metric])
ambiguous = {k: v for k, v in pairs.items() if len(v) > 1}
if ambiguous:
    sys.exit(f"labels naming more than one metric: {ambiguous}")
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(["section", "label", "metric"])
for (sec, label), names in sorted(pairs.items()):
    out.writerow([sec, label, names.pop()])
