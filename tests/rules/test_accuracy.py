"""Accuracy over a labelled corpus: every embedded example of every rule is a labelled snippet
(INVALID: positive for its rule, VALID: negative), and EVERY rule runs on EVERY snippet, so a rule
that fires on another rule's snippets loses precision. `ALSO_EXPECTED` lists the snippets where a
second rule is right to fire too. Prints precision and recall per rule; none may fall below 0.9."""

from __future__ import annotations

from collections import Counter

from torchport.rules import all_rules
from torchport.rules.engine import analyze
from torchport.scan.files import file_kind

ALL_CODES = tuple(rule.code for rule in all_rules())
#: Snippet source -> other rules that are right to fire on it as well (a second real pattern).
ALSO_EXPECTED: dict[str, set[str]] = {
    "import torch\nx = torch.zeros(2, device='cuda')\n": {"TP104"},
    "import torch\nif device.type == 'cuda':\n    pass\n": {"TP105"},
    "import torch\nok = torch.cuda.is_available()\n": {"TP107"},
    "x = x.cuda(gpu)\n": {"TP108"},
    "device = device('cuda')\n": {"TP101"},
    "from torch.cuda import is_available\nimport torch\n"
    "d = torch.device('cuda') if is_available() else torch.device('cpu')\n": {"TP103"},
    "import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\n": {"TP106"},
    "x = x.cuda()\n": {"TP102"},
    "d = 'cuda:0'\n": {"TP101"},
    "import torch\nstate = torch.load(path, map_location=torch.device('cuda:0'))\n": {"TP103"},
    "import torch\nstate = torch.load(path, map_location=lambda storage, loc: storage.cuda())\n": {"TP102"},
    "import torch\nif torch.cuda.is_available():\n    d = 'cuda'\nelif torch.backends.mps.is_available():\n"
    "    d = 'mps'\nelse:\n    d = 'cpu'\n": {"TP101", "TP107"},
    "import torch\nassert torch.cuda.device_count() >= 2\n": {"TP113"},
    "import torch\nmajor = torch.cuda.get_device_properties(0).major\n": {"TP407"},
    "import torch\nm = torch.compile(model, mode='reduce-overhead')\n": {"TP217"},
    "import torch\nwith torch.amp.autocast('cuda'):\n    pass\n": {"TP209"},
    "import torch\nopt = torch.optim.AdamW(params, fused='cuda' in device_type)\n": {"TP105"},
    "import torch\nopt = torch.optim.Adam(params, fused=torch.cuda.is_available())\n": {"TP107"},
    "import torch\nm = torch.compile(model, dynamic=False)\n": {"TP217"},
    "import torch\nm = torch.compile(model)\n": {"TP217"},
    "import torch\nm = torch.compile(model, dynamic=True)\n": {"TP217"},
}


def _corpus():
    for rule in all_rules():
        for kind in ("valid", "invalid"):
            for example in rule.examples(kind):
                yield rule.code, kind == "invalid", example


def test_precision_and_recall_per_rule(capsys):
    true_positive, false_positive, false_negative = Counter(), Counter(), Counter()
    snippets = 0
    for owner, positive, example in _corpus():
        kind = file_kind(example.filename)
        if kind is None:
            continue
        snippets += 1
        fired = {finding.code for finding in analyze(example.source.encode(), example.filename, kind, ALL_CODES).findings}
        expected = ({owner} if positive else set()) | ALSO_EXPECTED.get(example.source, set())
        for code in fired:
            if code in expected:
                true_positive[code] += 1
            else:
                false_positive[(code, owner, example.source)] += 1
        for code in expected - fired:
            false_negative[code] += 1
    assert snippets >= 60
    rows = []
    low = []
    for code in ALL_CODES:
        fp = sum(count for (rule, _, _), count in false_positive.items() if rule == code)
        tp, fn = true_positive[code], false_negative[code]
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        rows.append(f"{code}  precision {precision:.2f}  recall {recall:.2f}  (tp {tp}, fp {fp}, fn {fn})")
        if precision < 0.9:
            low.append(code)
    with capsys.disabled():
        print(f"\naccuracy over {snippets} labelled snippets")
        print("\n".join(rows))
    details = [f"{code} on {owner}'s snippet {source!r}" for (code, owner, source) in false_positive if code in low]
    assert not low, "precision below 0.9:\n" + "\n".join(details)
