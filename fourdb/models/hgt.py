"""Heterogeneous Graph Transformer (Hu et al., 2020) on sampled heterograph blocks.

Every table has its own key, query, value and output projections; every edge type r its own
attention matrix W_att[r], message matrix W_msg[r] and per-head prior mu[r]. For an edge u -> v of
type r and head i, the attention logit is (K_i(u) W_att[r,i] . Q_i(v)) mu[r,i] / sqrt(d), softmaxed over
all of v's in-edges of every type, and v receives sum_u softmax * V_i(u) W_msg[r,i], then
A_{type(v)}(GELU(.)). (dgl.nn.HGTConv wants a homogeneous graph; this layer runs on the blocks as they are.)
"""
from __future__ import annotations

import math

import torch
from torch import nn

from fourdb.errors import FourdbError
from fourdb.models.base import register_model
from fourdb.models.encoders import key
from fourdb.models.gnn import GNN


class HGTConv(nn.Module):
    def __init__(self, etypes, hidden: int, heads: int):
        super().__init__()
        if hidden % heads:
            raise FourdbError(f"model 'hgt': hidden={hidden} must be divisible by heads={heads}")
        self.heads, self.dim = heads, hidden // heads
        ntypes = sorted({t for et in etypes for t in (et[0], et[2])})
        self.k, self.q, self.v, self.a = (nn.ModuleDict({key(t): nn.Linear(hidden, hidden) for t in ntypes})
                                          for _ in range(4))
        eye = torch.eye(self.dim).expand(heads, -1, -1)
        self.att = nn.ParameterDict({key(et[1]): nn.Parameter(eye.clone()) for et in etypes})
        self.msg = nn.ParameterDict({key(et[1]): nn.Parameter(eye.clone()) for et in etypes})
        self.prior = nn.ParameterDict({key(et[1]): nn.Parameter(torch.ones(heads)) for et in etypes})

    def forward(self, block, h):
        h_src, h_dst = h
        H, D = self.heads, self.dim
        k = {t: self.k[key(t)](x).view(-1, H, D) for t, x in h_src.items()}
        v = {t: self.v[key(t)](x).view(-1, H, D) for t, x in h_src.items()}
        q = {t: self.q[key(t)](x).view(-1, H, D) for t, x in h_dst.items()}
        logits, messages, ends = {}, {}, {}  # per destination table: one entry per edge type into it
        for et in block.canonical_etypes:
            src_t, name, dst_t = et
            if block.num_edges(et) == 0:
                continue
            u, w = block.edges(etype=et)
            kr = torch.einsum("nhd,hde->nhe", k[src_t], self.att[key(name)])
            logits.setdefault(dst_t, []).append((kr[u] * q[dst_t][w]).sum(-1) * self.prior[key(name)] / math.sqrt(D))
            messages.setdefault(dst_t, []).append(torch.einsum("nhd,hde->nhe", v[src_t], self.msg[key(name)])[u])
            ends.setdefault(dst_t, []).append(w)
        out = {}
        for t in logits:
            a, m, w = torch.cat(logits[t]), torch.cat(messages[t]), torch.cat(ends[t])
            n = block.num_dst_nodes(t)
            # softmax over each destination's in-edges of every type
            top = a.new_full((n, H), -math.inf).scatter_reduce(0, w[:, None].expand(-1, H), a.detach(), "amax")
            e = torch.exp(a - top[w])
            e = e / e.new_zeros((n, H)).index_add_(0, w, e)[w]
            agg = m.new_zeros((n, H, D)).index_add_(0, w, e.unsqueeze(-1) * m)
            out[t] = self.a[key(t)](nn.functional.gelu(agg.flatten(1)))
        return out


@register_model("hgt")
class HGT(GNN):
    def conv(self, etypes, hidden, heads: int):
        return HGTConv(etypes, hidden, heads)
