"""kgen: render, lint and run multi-node PyTorch training on Kubernetes."""

__version__ = "0.1.0"
