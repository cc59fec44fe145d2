"""TorchX's ``torchx.util`` helpers that its public API is built on (served
as ``torchx.util`` by :mod:`trun.alias`): :mod:`trun.util.entrypoints`."""
