"""Models: tabular (gbdt, lightgbm, mlp, deepfm, fttransformer) and graph (sage, gat, hgt, pna, rgcn, relgt, musegnn),
one file each,
found by the registry in ``fourdb.models.base``."""
from fourdb.models.base import MODELS, Model, NeuralModel, TaskInfo, check_params, create_model, register_model

__all__ = ["MODELS", "Model", "NeuralModel", "TaskInfo", "check_params", "create_model", "register_model"]
