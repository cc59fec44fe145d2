"""What ``import torchx`` gives under trun's alias (trun.alias): the package of
the ``torchx.*`` modules trun serves."""

__version__ = "0.8.0+trun"
# The builtin components' own default image (TorchX's torchx.IMAGE).
IMAGE = None
