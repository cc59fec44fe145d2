"""TorchX's ``torchx.apps``: the programs that trun's builtin components run
inside the replicas (the image must have trun's Python package)."""
