"""The graphs wing: pure ONNX graph operations (no onnxruntime): exposing tensors, subgraphs,
fp32 conversion and islands, the precision each node ran in (read from a release's optimized graph),
the internal fp16 margin's tensors. The lowest wing above the shared words; anything may use it.
"""
