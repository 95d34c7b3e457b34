"""A GRU tagger checked on neuron-emulated: the fused GRU cell runs, and the real hazards are listed."""

import textwrap

import torch
from torch import nn

from torchport.check import check_model, check_script


class GruTagger(nn.Module):
    def __init__(self, vocabulary=40, tags=5):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, 16, padding_idx=0)
        self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, tags)

    def forward(self, tokens):
        hidden, _ = self.gru(self.embedding(tokens))
        return self.head(hidden)


def tag_loss(logits, tokens):
    # Score real tokens only: indexing by nonzero is the hazard a static-shape target rejects.
    positions = (tokens != 0).flatten().nonzero().squeeze(1)
    flat = logits.flatten(0, 1)[positions]
    return nn.functional.cross_entropy(flat, torch.zeros(len(positions), dtype=torch.long, device=flat.device))


def sentences():
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(1, 40, (2, length), generator=generator) for length in (5, 9, 14, 17, 30)]


def test_gru_tagger_check_lists_nonzero_and_bucketing_not_an_emulator_crash(target):
    torch.manual_seed(0)
    report = check_model(GruTagger(), sentences(), target="neuron", loss_function=tag_loss)
    ops = {op["name"]: op for op in report.data["ops"]}
    assert ops["aten::_thnn_fused_gru_cell"]["count"] > 0  # the accelerator's fused path ran
    assert ops["aten::nonzero"]["status"] == "unsupported"
    assert report.verdict == "blocked: unsupported ops ['aten::nonzero']"
    bucketing = report.data["shapes"]["bucketing"]
    assert bucketing["dimensions"][0]["dimension"] == 1  # the sentence length varies
    assert report.data["shapes"]["predicted_compilations"] == 5
    assert report.data["not_emulated_count"] == 0
    problems = " ".join(fix["problem"] for fix in report.data["fixes"])
    assert "aten::nonzero is unsupported on neuron" in problems and "compilations" in problems


def test_gru_tagger_script_checked_with_the_cli_path(target, tmp_path):
    script = tmp_path / "tagger.py"
    script.write_text(textwrap.dedent(
        """
        import torch
        from torch import nn

        device = torch.device("cuda")
        gru = nn.GRU(8, 12, batch_first=True).cuda()
        head = nn.Linear(12, 3).to(device)
        optimizer = torch.optim.SGD(list(gru.parameters()) + list(head.parameters()), lr=0.1)
        for length in (4, 7, 11):
            tokens = torch.randn(2, length, 8, device=device)
            hidden, _ = gru(tokens)
            logits = head(hidden)
            keep = (tokens[..., 0] > 0).nonzero()
            loss = logits[keep[:, 0], keep[:, 1]].logsumexp(-1).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            print("loss", loss.item())
        """
    ))
    report = check_script(str(script), [], target="neuron")
    ops = {op["name"]: op for op in report.data["ops"]}
    assert report.data["program"]["ended"] == "returned", report.data["program"]
    assert ops["aten::_thnn_fused_gru_cell"]["count"] == 4 + 7 + 11
    assert ops["aten::nonzero"]["status"] == "unsupported"
    assert report.verdict.startswith("blocked: unsupported ops")
    assert report.data["shapes"]["predicted_compilations"] > 1
