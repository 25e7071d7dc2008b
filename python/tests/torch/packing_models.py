"""Models for test_packing.py, importable as MODULE:NAME by the pytest plugin's --deltacheck-model:
a tiny Qwen3.5 behind a wrapper that routes each packed sequence through the model on its own
(a correct packing path, cut where position_ids restart), and the same with a planted error."""
import torch

from deltacheck.packing import tiny_model


class PerSequence(torch.nn.Module):
    """A correct packing path: the packed row cut where position_ids restart at 0, each piece run
    alone, the logits concatenated. offset is added to the logits of every piece from
    `wrong_from` on (a planted bug: 0 keeps it correct)."""

    def __init__(self, inner, offset=0.0, wrong_from=1):
        super().__init__()
        self.inner, self.offset, self.wrong_from = inner, offset, wrong_from
        self.config = inner.config

    def forward(self, input_ids, position_ids=None, use_cache=False, **kwargs):
        if position_ids is None:
            return self.inner(input_ids=input_ids, use_cache=use_cache)
        starts = (position_ids[0] == 0).nonzero().flatten().tolist() + [input_ids.shape[1]]
        parts = []
        for i, (a, b) in enumerate(zip(starts, starts[1:])):
            logits = self.inner(input_ids=input_ids[:, a:b], use_cache=use_cache).logits
            parts.append(logits + (self.offset if i >= self.wrong_from else 0.0))
        return type("Out", (), {"logits": torch.cat(parts, dim=1)})()


def per_sequence_model():
    return PerSequence(tiny_model("qwen3_5"))


def wrong_second_sequence_model():
    return PerSequence(tiny_model("qwen3_5"), offset=1e-4, wrong_from=1)
