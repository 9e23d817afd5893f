"""Derive src/kwarehouse/ingest/ncu_rules.csv and ncu_sections.csv from Nsight Compute's own rule and
section sources (the `sections/` folder of an ncu install, e.g. /opt/nvidia/nsight-compute/2025.3.1/sections).

Rules: each `<Rule>.py` names its rule (get_identifier) and section (get_section_identifier) and prints
its messages with `fe.message(type, text, ...)`. The text is followed back through the rule's code
(string literals, f-strings, .format, `+`, conditional expressions, the assignments of a variable) to the
templates it can start with; a template becomes a regular expression for the start of the description
as ncu prints it: links (`@section:Id:Label@`, `@url:Text:Link@`) as ncu renders them, every value a
placeholder (`.+?`), runs of spaces as one (kwh's readers keep one), cut after its first ~40 literal
characters. Sections: each `.section` file's Identifier and DisplayName (what the console text prints
after "Section:").

    python tools/derive_ncu_rules.py /path/to/ncu/sections [--version 2025.3.1]

prints both tables (rules first, then a line `---`, then sections) for review; the CSVs in the package
hold them with a comment saying where they came from.
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import itertools
import re
import sys
from pathlib import Path

HOLE = object()            # a value the template does not know (a number, a name, a sentence chosen at run time)
MAX_TEMPLATES = 64         # per message argument: conditional pieces multiply
LITERAL_CHARS = 40         # literal characters a pattern keeps before it is cut (at a word end)
LINK = re.compile(r"@(?P<kind>section|url|sass|source):(?P<text>[^:@]*)(?::(?P<target>[^@]*))?@")


def _join(parts: list) -> list:
    """Adjacent literals merged, adjacent holes merged."""
    out: list = []
    for part in parts:
        if part is HOLE and out and out[-1] is HOLE:
            continue
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part is HOLE or part:
            out.append(part)
    return out


def _format_holes(text: str, pattern: str) -> list:
    """A .format or %-format string: its replacement fields as holes."""
    parts: list = []
    for piece in re.split(f"({pattern})", text):
        parts.append(HOLE if re.fullmatch(pattern, piece or "x") else piece.replace("{{", "{").replace("}}", "}"))
    return _join(parts)


class Templates:
    """What a string expression of one rule file can start with."""

    def __init__(self, tree: ast.Module):
        self.module_assign = self._assignments(tree.body)

    @staticmethod
    def _assignments(body) -> dict[str, list[ast.expr]]:
        found: dict[str, list[ast.expr]] = {}
        for node in itertools.chain.from_iterable(ast.walk(n) for n in body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, []).append(node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                found.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                # `text += more` after `text = ""`: the start may be any appended piece
                found.setdefault("+=" + node.target.id, []).append(node.value)
        return found

    def of(self, expr: ast.expr, scope: dict, seen: frozenset = frozenset()) -> list[list]:
        if isinstance(expr, ast.Constant):
            return [[expr.value]] if isinstance(expr.value, str) else [[HOLE]]
        if isinstance(expr, ast.JoinedStr):
            return [_join([v.value if isinstance(v, ast.Constant) else HOLE for v in expr.values])]
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
            return [_join([p for part in t for p in (_format_holes(part, r"\{[^{}]*\}") if isinstance(part, str)
                                                     else [part])]) for t in self.of(expr.func.value, scope, seen)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod):
            return [_join([p for part in t for p in (_format_holes(part, r"%[-+ #0-9.]*[sdfrx%]")
                                                     if isinstance(part, str) else [part])])
                    for t in self.of(expr.left, scope, seen)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.of(expr.left, scope, seen), self.of(expr.right, scope, seen)
            return [_join(a + b) for a, b in itertools.islice(itertools.product(left, right), MAX_TEMPLATES)]
        if isinstance(expr, ast.IfExp):
            return (self.of(expr.body, scope, seen) + self.of(expr.orelse, scope, seen))[:MAX_TEMPLATES]
        if isinstance(expr, ast.Name) and expr.id not in seen:
            values = scope.get(expr.id) or self.module_assign.get(expr.id)
            if values:
                out = []
                for value in values:
                    for template in self.of(value, scope, seen | {expr.id}):
                        if template:
                            out.append(template)
                        else:   # "" then +=: any appended piece can start it
                            for more in scope.get("+=" + expr.id, []):
                                out.extend(self.of(more, scope, seen | {expr.id}))
                return out[:MAX_TEMPLATES]
        return [[HOLE]]


def _rendered(parts: list) -> list:
    """Links as ncu prints them: a section link as its label, a URL as 'text (link)'."""
    out: list = []
    for part in parts:
        if part is HOLE:
            out.append(HOLE)
            continue
        last = 0
        for link in LINK.finditer(part):
            out.append(part[last:link.start()])
            if link["kind"] == "section":     # @section:<identifier>:<label>@
                out.append(link["target"] or link["text"])
            elif link["kind"] == "url":
                out.append(f"{link['text']} ({link['target']})")
            else:
                out.append(HOLE)
            last = link.end()
        out.append(part[last:])
    return _join(out)


def pattern(parts: list) -> str | None:
    """The regular expression for a description that starts as `parts` (None: too little is known)."""
    parts = _rendered(parts)
    while parts and isinstance(parts[0], str) and not parts[0].strip():
        parts.pop(0)
    if parts and isinstance(parts[0], str):
        parts[0] = parts[0].lstrip()
    out, literal = [], 0
    for part in parts:
        if literal >= LITERAL_CHARS:
            break
        if part is HOLE:
            out.append(".+?")
            continue
        text = re.sub(" {2,}", " ", part)
        if literal + len(text) > LITERAL_CHARS:
            cut = text.find(" ", LITERAL_CHARS - literal)
            text = text if cut < 0 else text[:cut]
        out.append(re.escape(text).replace(r"\ ", " "))
        literal += len(text)
    while out and out[-1] == ".+?":
        out.pop()
    if literal < 12 or not out:
        return None
    return "".join(out)


def _missing_metric_patterns(tree: ast.Module) -> list[str]:
    """RequestedMetrics.py's messages for a metric the rule requests that the report lacks: "The optional
    metric <name> could not be found." (a warning, for an OPTIONAL request with warn_when_missing, the
    default) and "Required metric <name> could not be found." (an error). The fields of MetricRequest:
    name, alias, importance (default REQUIRED), default_value, warn_when_missing (default True)."""
    out = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "MetricRequest"
                and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)):
            continue
        fields = dict(zip(("name", "alias", "importance", "default_value", "warn_when_missing"), call.args))
        fields.update((k.arg, k.value) for k in call.keywords if k.arg)
        importance = fields.get("importance")
        optional = isinstance(importance, ast.Attribute) and importance.attr == "OPTIONAL"
        warn = fields.get("warn_when_missing")
        metric = re.escape(call.args[0].value)
        if not optional:
            out.append(f"Required metric {metric} could not be found")
        elif not (isinstance(warn, ast.Constant) and warn.value is False):
            out.append(f"The optional metric {metric} could not be found")
    return out


def _returned(tree: ast.Module, function: str) -> str | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            for statement in ast.walk(node):
                if isinstance(statement, ast.Return) and isinstance(statement.value, ast.Constant):
                    return statement.value.value
    return None


def rules(folder: Path) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name, section = _returned(tree, "get_identifier"), _returned(tree, "get_section_identifier")
        if not name or not section:
            continue
        templates = Templates(tree)
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            scope = Templates._assignments(function.body)
            for call in ast.walk(function):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "message" and len(call.args) >= 2):
                    found = templates.of(call.args[1], scope)
                    if found == [[HOLE]]:
                        # a text kept in a container first (CPIStall: a tuple per stall): the
                        # function's assignments to names that say they hold a message
                        found = [t for var, values in scope.items() if not var.startswith("+=")
                                 and re.search("message|msg", var) for v in values for t in templates.of(v, scope)]
                    for template in found:
                        if (regex := pattern(template)) is not None:
                            rows.append((section, regex, name))
        rows.extend((section, regex, name) for regex in _missing_metric_patterns(tree))
    unique = list(dict.fromkeys(rows))
    # a start two rules of one section share names neither
    owners: dict[tuple[str, str], set[str]] = {}
    for section, regex, name in unique:
        owners.setdefault((section, regex), set()).add(name)
    unique = [row for row in unique if len(owners[row[:2]]) == 1]
    # most specific first: a pattern that starts with a value goes after those that start with words
    return sorted(unique, key=lambda r: (r[0], r[1].startswith(".+?"), r[1]))


def sections(folder: Path) -> list[tuple[str, str]]:
    rows = []
    for path in sorted(folder.glob("*.section")):
        text = path.read_text(encoding="utf-8", errors="replace")
        ident = re.search(r'^Identifier:\s*"([^"]+)"', text, re.MULTILINE)
        label = re.search(r'^DisplayName:\s*"([^"]+)"', text, re.MULTILINE)
        if ident and label:
            rows.append((label.group(1), ident.group(1)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the sections/ folder of an ncu install")
    args = parser.parse_args()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["section", "starts_with", "rule_name"])
    writer.writerows(rules(args.folder))
    out.write("---\n")
    writer.writerow(["label", "section"])
    writer.writerows(sections(args.folder))
    sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main()
