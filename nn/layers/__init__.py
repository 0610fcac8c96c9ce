"""Layers: each a Module (and, where it makes sense, a function in nn.functional)."""
