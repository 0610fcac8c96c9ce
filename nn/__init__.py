"""nn: modules, layers, losses, optimizers and serialization on the tensorlab engine.

Shaped like ``torch.nn`` so that a PyTorch user is at home: ``nn.Module``, ``nn.Linear``,
``nn.functional as F``, ``nn.optim.AdamW``.
"""

from nn.layers import *  # noqa: F403  (each layer module lists its public names in __all__)
from nn.module import (
    HookPoint,
    Module,
    ModuleDict,
    ModuleList,
    Parameter,
    Sequential,
    evaluating,
    module_scopes,
)

from nn import data_parallel, functional, init, optim, serialization  # isort: skip
