"""The model in fp32, for `--reference fp32`: an embedded model's twin, or the model converted once into the cache."""

from __future__ import annotations

from pathlib import Path


def fp32_model(resolved, cache_dir: Path) -> tuple[Path, str]:
    """(path, how) of the model in fp32: an embedded model's twin, else converted once into the cache.

    The conversion keeps the model's interface (fp16 inputs are cast in,
    outputs cast back), so the run's batch feeds it as it is.
    """
    spec = resolved.spec
    if spec.source == "generated":
        from harness.models import embedded

        made = embedded.materialize(spec.generator, Path(cache_dir) / "models" / spec.name)
        if made.get("model_fp32"):  # the full-size model has none: converted below like any model
            return Path(made["model_fp32"]), "the embedded model's fp32 twin, same weights"
    import onnx

    from harness.graphs.fp32 import to_fp32

    dest = Path(cache_dir) / "references" / f"{resolved.digest[:16]}.fp32.onnx"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        converted = to_fp32(onnx.load(str(resolved.path)))
        tmp = dest.with_name(dest.name + ".tmp")
        big = converted.ByteSize() > (1 << 30)  # protobuf's 2 GB ceiling: weights beside the model
        onnx.save_model(converted, str(tmp), save_as_external_data=big, location=dest.name + ".data")
        tmp.replace(dest)
    return dest, "converted to fp32 by ortbisect, every node in fp32"
