"""ortbisect: release bisection for numerical regressions in onnxruntime."""

__version__ = "0.1.0"
