"""TorchX's ``torchx.runtime``: helpers for the programs a job runs
(:mod:`trun.runtime.tracking`). Served as ``torchx.runtime`` by :mod:`trun.alias`."""
