"""The graphs wing: pure ONNX graph operations (no onnxruntime): exposing tensors, subgraphs,
fp32 conversion and islands. The lowest wing above the shared words; anything may use it.
"""
