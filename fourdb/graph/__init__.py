"""Relational database -> DGL heterograph, one registry of constructions (r2n, r2ne)."""
from fourdb.graph.build import GRAPHS, RelGraph, build_graph, built_graph, same_graphs

__all__ = ["GRAPHS", "RelGraph", "build_graph", "built_graph", "same_graphs"]
