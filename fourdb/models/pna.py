"""Principal Neighbourhood Aggregation over the relational heterograph, one PNA aggregator per edge type.

Per edge type, neighbour messages W_r h_u are aggregated by mean, max, min and standard deviation,
each scaled by the identity, amplification log(d+1)/delta and attenuation delta/log(d+1) (d the
node's in-degree in the sampled block, delta the typical log(d+1), about log(1 + fanout)); the
concatenation is mixed back to ``hidden`` by a linear layer per edge type, and edge types are summed.
"""
from __future__ import annotations

import dgl.function as fn
import torch
from torch import nn

from fourdb.errors import FourdbError
from fourdb.models.base import register_model
from fourdb.models.encoders import key
from fourdb.models.gnn import GNN

AGGREGATORS = ("mean", "max", "min", "std")
SCALERS = ("identity", "amplification", "attenuation")


class PNAConv(nn.Module):
    def __init__(self, etypes, hidden: int, aggregators: tuple[str, ...], scalers: tuple[str, ...], delta: float):
        super().__init__()
        for name, given, known in (("aggregator", aggregators, AGGREGATORS), ("scaler", scalers, SCALERS)):
            if not given or set(given) - set(known):
                raise FourdbError(f"model 'pna': {name}s must be a non-empty subset of {list(known)}, got {list(given)}")
        self.aggregators, self.scalers, self.delta = list(aggregators), list(scalers), delta
        width = len(self.aggregators) * len(self.scalers) * hidden
        self.message = nn.ModuleDict({key(et[1]): nn.Linear(hidden, hidden) for et in etypes})
        self.mix = nn.ModuleDict({key(et[1]): nn.Linear(width, hidden) for et in etypes})

    def forward(self, block, h):
        h_src, _ = h
        out = {}
        for et in block.canonical_etypes:
            if block.num_edges(et) == 0:
                continue
            src_t, name, dst_t = et
            rel = block[et]
            with rel.local_scope():
                m = self.message[key(name)](h_src[src_t])
                rel.srcdata["m"], rel.srcdata["m2"] = m, m * m
                for agg in ("mean", "max", "min"):
                    if agg in self.aggregators or (agg == "mean" and "std" in self.aggregators):
                        rel.update_all(fn.copy_u("m", "e"), getattr(fn, agg)("e", agg))
                if "std" in self.aggregators:
                    rel.update_all(fn.copy_u("m2", "e"), fn.mean("e", "mean2"))
                    rel.dstdata["std"] = torch.sqrt(torch.relu(rel.dstdata["mean2"] - rel.dstdata["mean"] ** 2) + 1e-5)
                aggregated = torch.cat([rel.dstdata[a] for a in self.aggregators], -1)
                log_deg = torch.log1p(rel.in_degrees().float().clamp(min=1)).unsqueeze(-1)
            scaled = {"identity": aggregated, "amplification": aggregated * (log_deg / self.delta),
                      "attenuation": aggregated * (self.delta / log_deg)}
            y = self.mix[key(name)](torch.cat([scaled[s] for s in self.scalers], -1))
            out[dst_t] = out[dst_t] + y if dst_t in out else y
        return out


@register_model("pna")
class PNA(GNN):
    def conv(self, etypes, hidden, aggregators: list[str], scalers: list[str], delta: float):
        return PNAConv(etypes, hidden, tuple(aggregators), tuple(scalers), delta)
