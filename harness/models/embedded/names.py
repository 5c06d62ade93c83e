"""The embedded models' names and fixed choices, importable without onnx.

A warm run only checks a generated model's stamp: it must not pay for the
generators' imports (onnx, tokenizers) to learn a name.
"""

DEFAULT_SEED = 0
RMSNORM = "rmsnorm-fp16-overflow"
GEMMA_300M = "gemma-300m-synthetic"
GEMMA_300M_DATA = "model.onnx_data"  # its external data, beside model.onnx
