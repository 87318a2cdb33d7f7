#!/usr/bin/env bash
# Tutorial: reproducing a paper and reading its verdicts (docs/tutorials/reproducing_a_paper.md).
# From the repository root, with .venv active: bash docs/tutorials/scripts/reproducing_a_paper.sh
# Needs neither the MNIST files nor a GPU: it reads the committed runs of paper 002 (DPFL-AGN)
# and rewrites docs/reproductions/002.md, 002.json and figures, which come out unchanged.
set -euo pipefail

echo "## 1. The report, regenerated from the committed sweep store (nothing is trained)"
fl-lightning repro 002 --report-only

echo "## 2. Did anything change? (git diff --stat of the report)"
git diff --stat -- docs/reproductions/002.md docs/reproductions/002.json
echo "(no lines above: the committed report is what the stored runs give)"

echo "## 3. The verdicts, from docs/reproductions/002.json"
python - <<'PY'
import json

doc = json.load(open("docs/reproductions/002.json"))
for v in doc["verdicts"]:
    test = v.get("test") or {}
    print(f"- {v['claim']}")
    print(f"  verdict: {v['verdict']}{' (headline)' if v.get('headline') else ''}")
    status = "confirmatory" if v.get("confirmatory") else "exploratory"
    print(f"  reading: {v.get('reading')}; {status}")
    if "estimate" in test:
        lo, hi = test["ci95"]
        print(f"  {test['comparison']}: {test['estimate']:+.2f} pt, 95 % CI [{lo:+.2f}, {hi:+.2f}],"
              f" n = {test['n']}; paper {test['paper_value']:+.2f}; MDE {test['mde']:.2f} pt")
    else:
        print(f"  why: {v.get('reason') or v.get('evidence', '')[:160]}")
PY
