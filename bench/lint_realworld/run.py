"""Score `kgen lint --strict` against hand-written labels on real training manifests and sbatch scripts.

    python bench/lint_realworld/run.py                 # both splits: precision, recall, --strict pass rate
    python bench/lint_realworld/run.py --split test    # the held-back split only
    python bench/lint_realworld/run.py --list          # per file: misses, false findings, matches
    python bench/lint_realworld/run.py --list --only-wrong --kind sbatch
    python bench/lint_realworld/run.py --json out.json # everything, machine-readable

Each folder under cases/ is one case: the file(s) copied (or modelled) from a public repository and
label.json (source, licence, split and, per file, "clean" or a list of defects with class, line and
severity). The labels were written and committed before lint was run on the files (see README.md).

Lint runs once, through the CLI (`python -m kgen lint --strict -o json FILE...`), on every labelled
file named explicitly; each case folder is its own apply unit (the default `--unit dir`), as a user
would lint the folder the file came from. Only findings that fail under --strict (error, warning)
count as detections; info findings never fail a run and are reported apart ("info-only hits").

Matching rule (a finding and a defect in the same file). A finding is true only when it is *about*
the labelled defect and *points at* it:
- about: its rule is mapped to the defect's class in classes.py (RULE_CLASSES), a fixed, committed
  mapping from rule ids to the defect classes they are about;
- points at: its line is within NEAR_LINES (3) of the defect's line or one of its extra "lines", or
  its path starts with the defect's "field", or it is in the same object (the same YAML document as
  one of the defect's lines; an sbatch script is one object).
A finding that matches any defect is a true finding, every other failing finding is false; a defect
matched by at least one finding is caught. precision = true findings / findings, recall = caught
defects / defects; `--strict` pass rate = clean files without any failing finding / clean files.

`--loose` scores with the first version's rule instead (any failing finding within 2 lines of the
defect, or on its field, whatever its rule): it over-credits, and is kept to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from classes import CLASSES, classes_of  # noqa: E402

CASES = HERE / "cases"
MATCH_LINES = 2  # --loose
NEAR_LINES = 3
FAILING = ("error", "warning")


def load_cases(root: Path = CASES) -> list[dict]:
    cases = []
    for label_file in sorted(root.glob("*/label.json")):
        case = json.loads(label_file.read_text())
        case["dir"] = label_file.parent
        for entry in case["files"].values():
            for defect in [] if entry["labels"] == "clean" else entry["labels"]:
                if defect["class"] not in CLASSES:
                    raise SystemExit(f"{label_file}: class {defect['class']!r} is not in classes.py")
        cases.append(case)
    return cases


def run_lint(files: list[Path], kubernetes_version: str = "1.33") -> list[dict]:
    """Findings of one `kgen lint --strict -o json` run over ``files`` (exit 1/2 are expected)."""
    repo_root = HERE.parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo_root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "kgen", "lint", "--strict", "-o", "json", "--kubernetes-version", kubernetes_version]
    proc = subprocess.run(cmd + [str(f) for f in files], capture_output=True, text=True, env=env, cwd=repo_root)
    if proc.returncode not in (0, 1, 2) or not proc.stdout.strip():
        raise SystemExit(f"kgen lint failed (exit {proc.returncode}): {proc.stderr.strip()[:2000]}")
    return json.loads(proc.stdout)["findings"]


def matches(finding: dict, defect: dict) -> bool:
    """The first version's rule (--loose): near the defect or on its field, whatever the rule."""
    lines = [defect["line"], *defect.get("lines", [])]
    if any(abs(int(finding.get("line") or 0) - line) <= MATCH_LINES for line in lines):
        return True
    field = defect.get("field")
    return bool(field) and str(finding.get("path", "")).startswith(field)


def document_starts(text: str, kind: str) -> list[int]:
    """First line (1-based) of each object of a file: YAML documents split at '---'; a script is one."""
    if kind == "sbatch":
        return [1]
    starts = [1]
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("---") and (not line[3:].strip() or line[3:].lstrip().startswith("#")):
            starts.append(number + 1)
    return starts


def document_of(line: int, starts: list[int]) -> int:
    """Index of the object holding ``line`` (-1 for a finding without a line)."""
    if line < 1:
        return -1
    return max(i for i, start in enumerate(starts) if start <= line)


def matches_strict(finding: dict, defect: dict, starts: list[int]) -> bool:
    """About the defect (the rule maps to its class) and pointing at it (near, its field, its object)."""
    if defect["class"] not in classes_of(finding["rule"]):
        return False
    lines = [defect["line"], *defect.get("lines", [])]
    line = int(finding.get("line") or 0)
    if any(abs(line - at) <= NEAR_LINES for at in lines):
        return True
    field = defect.get("field")
    if field and str(finding.get("path", "")).startswith(field):
        return True
    doc = document_of(line, starts)
    return doc >= 0 and doc in {document_of(at, starts) for at in lines}


def score(cases: list[dict], findings: list[dict], loose: bool = False) -> list[dict]:
    """One record per labelled file: its defects (caught or missed) and its findings (true or false)."""
    by_file: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        by_file[os.path.realpath(f.get("file", ""))].append(f)
    records = []
    for case in cases:
        for name, entry in case["files"].items():
            path = os.path.realpath(case["dir"] / name)
            labels = entry["labels"]
            defects = [] if labels == "clean" else labels
            failing = [f for f in by_file.get(path, []) if f["severity"] in FAILING]
            info = [f for f in by_file.get(path, []) if f["severity"] not in FAILING]
            if loose:
                match = matches
            else:
                starts = document_starts((case["dir"] / name).read_text(), case["kind"])

                def match(f: dict, d: dict, starts: list[int] = starts) -> bool:
                    return matches_strict(f, d, starts)

            matched_by = [sorted({f["rule"] for f in failing if match(f, d)}) for d in defects]
            caught = [bool(m) for m in matched_by]
            info_hit = [not c and any(match(f, d) for f in info) for d, c in zip(defects, caught, strict=True)]
            true = [any(match(f, d) for d in defects) for f in failing]
            records.append(
                {
                    "case": case["id"],
                    "file": name,
                    "kind": case["kind"],
                    "split": case["split"],
                    "repo": case["source"]["repo"],
                    "clean": not defects,
                    "defects": [
                        dict(d, caught=c, info_only=i, matched_by=m)
                        for d, c, i, m in zip(defects, caught, info_hit, matched_by, strict=True)
                    ],
                    "findings": [
                        {k: f.get(k) for k in ("rule", "severity", "line", "path", "message")} | {"true": t}
                        for f, t in zip(failing, true, strict=True)
                    ],
                }
            )
    return records


def totals(records: list[dict]) -> dict:
    t = {
        "files": len(records),
        "defects": 0,
        "caught": 0,
        "hard": 0,
        "hard_caught": 0,
        "info_only": 0,
        "findings": 0,
        "true": 0,
        "clean": 0,
        "clean_pass": 0,
    }
    for r in records:
        t["defects"] += len(r["defects"])
        t["caught"] += sum(d["caught"] for d in r["defects"])
        t["hard"] += sum(d["severity"] == "hard" for d in r["defects"])
        t["hard_caught"] += sum(d["caught"] and d["severity"] == "hard" for d in r["defects"])
        t["info_only"] += sum(d["info_only"] for d in r["defects"])
        t["findings"] += len(r["findings"])
        t["true"] += sum(f["true"] for f in r["findings"])
        if r["clean"]:
            t["clean"] += 1
            t["clean_pass"] += not r["findings"]
    return t


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:5.1f} %" if b else "    - "


def table(records: list[dict], title: str) -> str:
    rows = [
        f"{title}",
        f"{'kind':<22}{'files':>6}{'repos':>6}{'defects':>8}{'recall':>9}{'hard rec.':>10}"
        f"{'findings':>9}{'precision':>10}{'clean':>6}{'strict pass':>12}",
    ]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        groups[r["kind"]].append(r)
    for kind in sorted(groups) + ["overall"]:
        rs = records if kind == "overall" else groups[kind]
        t = totals(rs)
        repos = len({r["repo"] for r in rs})
        rows.append(
            f"{kind:<22}{t['files']:>6}{repos:>6}{t['defects']:>8}{pct(t['caught'], t['defects']):>9}"
            f"{pct(t['hard_caught'], t['hard']):>10}{t['findings']:>9}{pct(t['true'], t['findings']):>10}"
            f"{t['clean']:>6}{pct(t['clean_pass'], t['clean']):>12}"
        )
    t = totals(records)
    rows.append(
        f"  caught {t['caught']}/{t['defects']} defects ({t['info_only']} more seen only as info); "
        f"{t['true']}/{t['findings']} failing findings true; {t['clean_pass']}/{t['clean']} clean files pass --strict"
    )
    return "\n".join(rows)


def by_class(records: list[dict]) -> str:
    """Per defect class: labelled, caught, missed, and the false findings of rules about that class."""
    labelled: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        for d in r["defects"]:
            labelled[d["class"]][0] += 1
            labelled[d["class"]][1] += d["caught"]
    false_by_class: dict[str, int] = defaultdict(int)
    false_by_rule: dict[str, int] = defaultdict(int)
    for r in records:
        for f in r["findings"]:
            if not f["true"]:
                false_by_rule[f"{f['rule']} {f['severity']}"] += 1
                for cls in classes_of(f["rule"])[:1] or ("(rule without a class)",):
                    false_by_class[cls] += 1
    out = [f"{'per class':<28}{'labelled':>9}{'caught':>7}{'missed':>7}{'false':>6}"]
    for cls in sorted(set(labelled) | set(false_by_class), key=lambda c: (-labelled[c][0], c)):
        n, c = labelled.get(cls, [0, 0])
        out.append(f"  {cls:<26}{n:>9}{c:>7}{n - c:>7}{false_by_class.get(cls, 0):>6}")
    out.append("false findings by rule (a rule's false findings count under its first class above):")
    out += [f"  {n:3}  {rule}" for rule, n in sorted(false_by_rule.items(), key=lambda kv: (-kv[1], kv[0]))]
    unmapped = sorted({f["rule"] for r in records for f in r["findings"] if not classes_of(f["rule"])})
    if unmapped:
        out.append(f"rules without a class in classes.py (all their findings count as false): {', '.join(unmapped)}")
    return "\n".join(out)


def listing(records: list[dict], only_wrong: bool) -> str:
    out = []
    for r in records:
        wrong = any(not d["caught"] for d in r["defects"]) or any(not f["true"] for f in r["findings"])
        if only_wrong and not wrong:
            continue
        state = "clean" if r["clean"] else f"{sum(d['caught'] for d in r['defects'])}/{len(r['defects'])} caught"
        out.append(f"{r['case']}/{r['file']}  [{r['kind']}, {r['split']}]  {state}")
        for d in r["defects"]:
            mark = "CAUGHT" if d["caught"] else ("INFO  " if d["info_only"] else "MISSED")
            by = f"  <- {', '.join(d['matched_by'])}" if d["matched_by"] else ""
            out.append(f"  {mark} line {d['line']:>4} {d['severity']:<11} {d['class']}: {d.get('title', '')}{by}")
        for f in r["findings"]:
            mark = "true " if f["true"] else "FALSE"
            out.append(f"  {mark}  line {f['line']:>4} {f['rule']} {f['severity']}: {f['message'][:150]}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=["train", "test", "all"], default="all")
    ap.add_argument("--kind", help="only this kind (e.g. sbatch, PyTorchJob)")
    ap.add_argument("--case", action="append", help="only this case id (repeatable)")
    ap.add_argument("--list", action="store_true", help="per file: defects caught/missed, findings true/false")
    ap.add_argument("--only-wrong", action="store_true", help="with --list: only files with a miss or a false finding")
    ap.add_argument("--json", metavar="FILE", help="write every record as JSON")
    ap.add_argument(
        "--loose",
        action="store_true",
        help="the first version's matching rule (any failing finding within 2 lines of a defect), to compare",
    )
    ap.add_argument("--cases-dir", default=str(CASES), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    cases = load_cases(Path(args.cases_dir))
    if args.kind:
        cases = [c for c in cases if c["kind"] == args.kind]
    if args.case:
        cases = [c for c in cases if c["id"] in set(args.case)]
    if not cases:
        print("kgen: error: no case matches (check --kind/--case)", file=sys.stderr)
        return 2
    files = [c["dir"] / name for c in cases for name in c["files"]]
    records = score(cases, run_lint(files), loose=args.loose)
    rule_name = "--loose: any failing finding within 2 lines" if args.loose else "rule about the class, at the defect"
    print(f"matching: {rule_name}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1) + "\n")
    splits = ["train", "test"] if args.split == "all" else [args.split]
    if args.list:
        print(listing([r for r in records if r["split"] in splits], args.only_wrong))
        print()
    for split in splits:
        rs = [r for r in records if r["split"] == split]
        if rs:
            print(table(rs, f"== split {split}: {len({r['case'] for r in rs})} cases"))
            print(by_class(rs))
            print()
    if args.split == "all":
        print(table(records, "== both splits"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
