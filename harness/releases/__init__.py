"""The releases wing: which onnxruntime builds exist (the index and the user's sources), which
package and execution provider a probe installs, and the uv executable that installs them.
"""
